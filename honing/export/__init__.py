"""Export: a run's trained weights as a Hugging Face model directory (optionally int8) with a
model card. The run is read through `honing.trainer.run_dir`.

    result = export_run(Path("runs/quickstart"), Path("exports/quickstart"), merge_lora=True)
    result = export_run_to_url(Path("runs/quickstart"), "s3://bucket/exports/quickstart")

Modules: `model` (the run's checkpoint as a model directory, LoRA merged or kept), `quantize`
(int8 and its measured cost), `card` (the model card).

Not covered: training (honing.trainer); serving the directory (honing.serve).
"""

from honing.export.model import ExportResult, export_run, export_run_to_url

__all__ = ["ExportResult", "export_run", "export_run_to_url"]
