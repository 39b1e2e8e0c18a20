"""Export and serving: a run's trained weights as a Hugging Face model directory (optionally
int8) with a model card, and an OpenAI-compatible server over such a directory.

    result = export_run(Path("runs/quickstart"), Path("exports/quickstart"), merge_lora=True)

Not covered: training (honing.trainer); what the server does (its own module).
"""

from honing.export.model import ExportResult, export_run

__all__ = ["ExportResult", "export_run"]
