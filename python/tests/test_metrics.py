"""TransferEngine.get_metrics(), metrics_text() and get_stats(): the engine's
metrics (docs/metrics.md) move by exactly the bytes moved."""
from conftest import REGION, new_engine, pattern


def series(metrics, family, **labels):
    """The one sample of `family` whose labels include `labels`."""
    hits = [s for s in metrics[family]["samples"] if all(s["labels"].get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (family, labels, metrics[family]["samples"])
    return hits[0]


def test_metrics_count_the_bytes_of_each_direction_per_peer(hw, pair):
    a, ra, b, rb = pair
    peer = b.get_segment_name()
    data = pattern(300000, 3)
    ra.write(0, data)
    assert a.transfer_sync_write(peer, ra.addr, rb.addr + 4096, len(data)) == 0, hw.last_error()
    assert a.transfer_sync_read(peer, ra.addr + 500000, rb.addr + 4096, 1000) == 0, hw.last_error()
    assert ra.read(500000, 1000) == data[:1000]
    m = a.get_metrics()
    assert m["hawser_transferred_bytes_total"]["type"] == "counter"
    w = series(m, "hawser_transferred_bytes_total", transport="tcp", peer=peer, direction="write")
    r = series(m, "hawser_transferred_bytes_total", transport="tcp", peer=peer, direction="read")
    assert (w["value"], r["value"]) == (len(data), 1000)
    assert series(m, "hawser_tasks_total", transport="tcp", peer=peer, direction="write")["value"] == 1
    assert series(m, "hawser_inflight_slices", transport="tcp", peer=peer)["value"] == 0
    h = series(m, "hawser_task_duration_seconds", transport="tcp", direction="read")
    assert h["count"] == 1 and h["sum"] > 0
    assert h["buckets"][-1] == (float("inf"), 1)
    assert [c for _, c in h["buckets"]] == sorted(c for _, c in h["buckets"])
    # The target served them.
    served = b.get_metrics()
    assert series(served, "hawser_served_bytes_total", transport="tcp", direction="write")["value"] == len(data)
    assert series(served, "hawser_served_bytes_total", transport="tcp", direction="read")["value"] == 1000
    text = a.metrics_text()
    assert "# TYPE hawser_transferred_bytes_total counter\n" in text
    line = f'hawser_transferred_bytes_total{{transport="tcp",peer="{peer}",direction="write"}} {len(data)}\n'
    assert line in text
    stats = a.get_stats()
    assert stats["engine"]["tasks_submitted"] == 2
    assert "tcp" in stats["transports"]


def test_metrics_of_an_uninitialized_engine_is_none_with_the_reason(hw):
    e = hw.TransferEngine()
    assert e.get_metrics() is None
    assert hw.last_error_code() == "invalid_argument"
    assert "initialize" in hw.last_error()
    assert e.metrics_text() is None
    assert e.get_stats() is None
