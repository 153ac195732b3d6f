"""cddp.distributed.elastic — the parts of torchelastic that training scripts import: the
`record` decorator and error types (multiprocessing.errors). The agent itself is cddp.run's
(launcher_core.py), which reads the error files `record` writes."""
