"""The worker processes of a parallel search."""

import multiprocessing

from aisimulate.spica.executor import _Worker
from tests.spica import fakes
from tests.spica.test_search import config


def test_a_worker_whose_coordinator_died_leaves_quietly(capfd):
    worker = _Worker(multiprocessing.get_context("spawn"), fakes.slow, config()).wait_ready()
    worker.conn.send({"agg_max_num_seqs": 8, "used_gpus": 1})
    worker.conn.close()  # the search process is gone before the evaluation ends
    worker.process.join(timeout=60)
    assert worker.process.exitcode == 0
    assert "Traceback" not in capfd.readouterr().err
