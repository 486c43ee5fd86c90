"""Local Flink and Spark clusters started by trajgraph, and the Beam flags that run a job on
them (``trajgraph flink|spark start|stop|status``; docs/scale-out.md).

A cluster is real: separate JVMs for the master and each TaskManager or Worker, Beam's job
server in front, and Python SDK workers started by the TaskManagers or executors as
processes of their own (Beam's boot program, ``--environment_type=PROCESS``). Built like
the local Neo4j: jars fetched with Maven on first use, detached processes with pid files
and logs under the cache dir, only our own pids ever signalled.

One module per concern:

- ``versions``: the Beam, Flink and Spark versions that go together, and their poms;
- ``layout``: where a cluster's files live and which ports it takes;
- ``boot``: Beam's Python boot program, built with Go once;
- ``members``: one process of a cluster, described for core/process.py's LocalProcess;
- ``flink``, ``spark``: each engine's config and command lines;
- ``cluster``: start, stop, status and the state file;
- ``control``: a cluster from settings (Java, jars, boot, the workers' environment);
- ``flags``: the Beam flags for a job on a cluster, and when FlinkRunner/SparkRunner
  take the running local one;
- ``cli``: ``trajgraph flink|spark ...`` and ``python -m trajgraph.pipelines.engines fetch``.
"""
