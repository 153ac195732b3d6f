"""cddp.distributed.elastic.multiprocessing — errors (record, ChildFailedError)."""
