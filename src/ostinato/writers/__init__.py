"""Writers: the trajectory writer, its column history, the structured writer, and the legacy
writer."""

from ostinato.writers.columns import ColumnHistory, TrajectoryColumn
from ostinato.writers.legacy_writer import Writer
from ostinato.writers.structured_writer import StructuredWriter
from ostinato.writers.trajectory_writer import TrajectoryWriter

__all__ = ["ColumnHistory", "StructuredWriter", "TrajectoryColumn", "TrajectoryWriter", "Writer"]
