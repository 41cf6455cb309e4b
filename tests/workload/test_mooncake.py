import json

import pytest

from aisimulate.errors import ConfigError
from aisimulate.workload import TraceWorkload, load_workload


def write(tmp_path, rows, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def requests(workload):
    return [t for s in workload.sessions() for t in s.turns]


def test_rows_become_requests_rebased_and_sped_up(tmp_path):
    path = write(
        tmp_path,
        [
            {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},
            {"timestamp": 3000, "input_length": 2000, "output_length": 7, "hash_ids": [1, 3]},
        ],
    )
    reqs = requests(TraceWorkload(trace_path=path, trace_block_size=512, arrival_speedup_ratio=2))
    assert [r.arrival_ms for r in reqs] == [0, 1000]
    assert reqs[0].input_tokens == 700
    assert reqs[1].input_tokens == 1024  # clamped to len(hash_ids) * block
    assert reqs[1].hash_block_tokens == 512


def test_sessions_group_turns_and_infer_delays(tmp_path):
    path = write(
        tmp_path,
        [
            {"timestamp": 0, "session_id": "a", "input_length": 10, "output_length": 2, "hash_ids": [1]},
            {"timestamp": 50, "session_id": "b", "input_length": 10, "output_length": 2, "hash_ids": [2]},
            {"timestamp": 400, "session_id": "a", "input_length": 20, "output_length": 2, "hash_ids": [1, 5]},
            {"session_id": "a", "delay": 30, "input_length": 30, "output_length": 2, "hash_ids": [1, 5, 6]},
        ],
    )
    sessions = list(TraceWorkload(trace_path=path).sessions())
    assert [len(s.turns) for s in sessions] == [3, 1]
    a = sessions[0].turns
    assert a[1].arrival_ms is None and a[1].delay_ms == 400 and a[2].delay_ms == 30


def test_max_requests_reads_a_prefix(tmp_path):
    path = write(tmp_path, [{"timestamp": i, "output_length": 1, "hash_ids": [i]} for i in range(10)])
    assert len(requests(TraceWorkload(trace_path=path, max_requests=4))) == 4


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ('{"timestamp": 0, "output_length": 3}', "hash_ids must be"),
        ('{"timestamp": 0, "output_length": 3, "hash_ids": []}', "hash_ids must be"),
        ('{"timestamp": 0, "hash_ids": [1]}', "missing output_length"),
        ('{"timestamp": 0, "input_length": -5, "output_length": 3, "hash_ids": [1]}', "input_length"),
        ('{"timestamp": "soon", "output_length": 3, "hash_ids": [1]}', "timestamp must be"),
        ('{"output_length": 3, "hash_ids": [1]}', "missing timestamp"),
        ('{"timestamp": 0, "output_length": 3, "hash_ids": [1], "delay": 5}', "first turn"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_broken_rows_name_file_and_line(tmp_path, row, match):
    good = json.dumps({"timestamp": 0, "output_length": 3, "hash_ids": [9]})
    path = write(tmp_path, [good, row])
    with pytest.raises(ConfigError, match=match) as err:
        requests(TraceWorkload(trace_path=path))
    assert f"{path}:2" in str(err.value)


def test_missing_and_empty_traces(tmp_path):
    with pytest.raises(ConfigError, match="cannot open trace"):
        requests(TraceWorkload(trace_path=tmp_path / "nope.jsonl"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="no requests"):
        requests(TraceWorkload(trace_path=empty))


def test_relative_trace_path_resolves_against_the_config_folder(tmp_path):
    write(tmp_path, [{"timestamp": 0, "output_length": 1, "hash_ids": [1]}])
    w = load_workload({"trace_path": "t.jsonl", "replay_concurrency": 3}, base_dir=tmp_path)
    assert w.trace_path == tmp_path / "t.jsonl" and w.mode == "closed" and w.concurrency == 3


def test_a_trace_is_parsed_once_while_the_file_is_unchanged(tmp_path):
    row = {"timestamp": 0, "output_length": 1, "hash_ids": [1]}
    path = write(tmp_path, [row])
    first = requests(TraceWorkload(trace_path=path))
    again = requests(TraceWorkload(trace_path=path))  # an equal workload: the parsed copy
    assert again == first and again[0] is first[0]
    write(tmp_path, [row, {**row, "timestamp": 5, "hash_ids": [2]}])
    changed = requests(TraceWorkload(trace_path=path))
    assert [r.arrival_ms for r in changed] == [0, 5]


def test_a_broken_trace_fails_on_every_read(tmp_path):
    path = write(tmp_path, [{"timestamp": 0, "hash_ids": [1]}])
    for _ in range(2):
        with pytest.raises(ConfigError, match="missing output_length"):
            requests(TraceWorkload(trace_path=path))
