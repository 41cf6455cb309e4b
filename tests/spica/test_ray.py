"""The Ray executor on a local Ray instance: same results as local execution, per-task timeouts."""

import pytest

from aisimulate.spica.search import run_smart_search
from tests.spica import fakes
from tests.spica.test_search import config, fingerprint

pytestmark = pytest.mark.filterwarnings("ignore::aisimulate.spica.experimental.ExperimentalWarning")
ray = pytest.importorskip("ray", reason="the Ray executor needs: pip install -e '.[ray]'")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_gives_the_same_results_as_local_and_stops_a_stuck_task(local_ray):
    local = run_smart_search(config(sweep__parallel_evals=2), evaluator=fakes.fake)
    on_ray = run_smart_search(config(sweep__parallel_evals=2, sweep__executor="ray"), evaluator=fakes.fake)
    assert fingerprint(on_ray) == fingerprint(local)
    stuck = config(
        sweep__executor="ray", sweep__parallel_evals=2, sweep__max_eval_seconds=5, sweep__max_rounds=1
    )
    result = run_smart_search(stuck, evaluator=fakes.hangs_on_big_batches)
    timed_out = [r for r in result.records if r.status == "failed"]
    assert timed_out and all(r.reason == "evaluation exceeded max_eval_seconds=5" for r in timed_out)
    assert all(r.sample["agg_max_num_seqs"] > 256 for r in timed_out)
