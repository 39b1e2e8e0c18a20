"""The trajectory store: every trajectory of a run as Parquet shards, queryable with DuckDB.

    async with TrajectoryWriter(run_dir) as writer:     # RUN/trajectories/part-NNNNN.parquet
        await writer.add_group(group)                   # + RUN/store.json (the manifest)
    read_trajectories(run_dir)                          # -> list[Trajectory], equal to those added
    query(run_dir, "SELECT domain, avg(reward) FROM trajectories GROUP BY 1")

    schema    the explicit Arrow schema of a shard and the conversion to and from records
    files     the on-disk layout, the manifest, finding complete shards, the turns' images
    writer    TrajectoryWriter: buffered, atomic shards, resumable
    query     reading back: records, SQL views `trajectories` and `turns`, terminal formatting
    rescore   re-scores kept beside the trajectories (RUN/rescores/STAMP/): rows, files, summary

The episode records it stores live in `honing.records` and are re-exported here. Not covered
here: replaying trajectories to re-score them (`honing.rollout.replay`, `honing.trainer.rescore`).
"""

from honing.records import Ending, Group, Retry, Trajectory, Turn
from honing.store.files import Manifest, Shard, complete_shards, read_image, rewind
from honing.store.query import (
    Column,
    QueryResult,
    View,
    describe,
    format_cell,
    format_text,
    format_views,
    iter_trajectories,
    query,
    read_trajectories,
    rich_table,
)
from honing.store.schema import SCHEMA_VERSION, TRAJECTORY
from honing.store.writer import TrajectoryWriter, WriterState

__all__ = [
    "SCHEMA_VERSION",
    "TRAJECTORY",
    "Column",
    "Ending",
    "Group",
    "Manifest",
    "QueryResult",
    "Retry",
    "Shard",
    "Trajectory",
    "TrajectoryWriter",
    "Turn",
    "View",
    "WriterState",
    "complete_shards",
    "describe",
    "format_cell",
    "format_text",
    "format_views",
    "iter_trajectories",
    "query",
    "read_image",
    "read_trajectories",
    "rewind",
    "rich_table",
]
