"""The jobs around the Beam pipelines: what ``trajgraph ingest`` and ``trajgraph stream`` add
to a pipeline run for a scheduler and a terminal.

A pipeline module (pipelines/ingest_pipeline.py, pipelines/stream_pipeline.py) describes
the data flow: flags, composed transforms, run. Its steps may execute on remote workers, so
it owns nothing of the launching process. That is the job's part, and it lives at the edge
with the CLI, because the launching process is what a scheduler sees:

- ``ingest``: the nightly ingest: which files to read (``manifest``), the run's counts and
  status (``summary``), the metrics file, the exit code, JSON output;
- ``signals``: SIGTERM/SIGINT end a run with its summary and metrics (exit 143/130);
- ``progress_bar``: the terminal's progress bar over the in-process counters;
- ``stream``: the streaming ingest's counters as JSON.
"""
