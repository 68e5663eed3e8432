#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<name>/seed-*).

Each seed is a small real input, laid out as the target reads its input
(see the comment at the top of tests/fuzz/<name>_fuzz.cpp). Regression
inputs of crashes found (crash-*) are kept beside the seeds and are not
touched here. Run from anywhere: python3 tests/fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

RPC_MAGIC, RPC_VERSION = 0x52535748, 2
TCP_MAGIC, TCP_VERSION = 0x44545748, 1
SHM_MAGIC, SHM_VERSION, SHM_CAPACITY = 0x6873776172746162, 3, 65536


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def rpc_frame(type_, length, status=0, id_=0, magic=RPC_MAGIC, version=RPC_VERSION):
    return struct.pack("<IHHIiQ", magic, version, type_, length, status, id_)


def tcp_header(type_, length, size, id_, addr=0, status=0, version=TCP_VERSION):
    return struct.pack("<IHBBIIQQ", TCP_MAGIC, version, type_, status, length, size, id_, addr)


def rpc():
    # [token wanted?] [Hello + token] [frames + bodies]
    write("rpc", "hello-ping", b"\0" + rpc_frame(1, 0) + rpc_frame(1, 1, id_=7) + b"x")
    write("rpc", "token-hello", b"\1" + rpc_frame(1, 12) + b"secret-token" + rpc_frame(0x1234, 2, id_=1) + b"{}")
    write("rpc", "ok-reply", b"\0" + rpc_frame(1, 0) + rpc_frame(1 | 0x8000, 4, id_=1) + b"pong")
    write("rpc", "error-reply", b"\0" + rpc_frame(1, 0) + rpc_frame(1 | 0x8000, 9, status=5, id_=1) + b"not found")
    write("rpc", "stream-hello", b"\0" + rpc_frame(0x2345, 0))


def rpc_partial():
    # [limit u8] [cuts u8 = N] [N u16 piece sizes] [stream]
    def cuts(*sizes):
        return struct.pack("<B", len(sizes)) + b"".join(struct.pack("<H", c) for c in sizes)
    write("rpc_partial", "hello-then-call", b"\0" + cuts(3, 30, 1) + rpc_frame(1, 5) + b"token" +
          rpc_frame(1, 4, id_=2) + b"ping")
    write("rpc_partial", "large-body-in-pieces", b"\1" + cuts(24, 65535, 7) + rpc_frame(0x1234, 70000, id_=1) +
          bytes(range(256)) * 274)
    write("rpc_partial", "announced-never-sent", b"\1" + cuts(1) + rpc_frame(1, 16 << 20, id_=1) + b"abc")
    write("rpc_partial", "over-the-limit", b"\2" + cuts(5) + rpc_frame(1, 101))


def tcp_run_table(runs):
    return b"".join(struct.pack("<QII", addr, length, 0) for addr, length in runs)


def tcp_wire():
    # [max_frame u32] [flags u8: 1 awaiting, 2 read, 4 RUNS] [id u64] [len u32]
    # [headers..., each accepted RUNS request followed by its run table]
    def prefix(read, id_, length, runs=False):
        return struct.pack("<IBQI", 64 << 20, 1 | (2 if read else 0) | (4 if runs else 0), id_, length)
    write("tcp_wire", "read", prefix(True, 5, 4096) + tcp_header(1, 0, 4096, 5, 0x7f0000001000) +
          tcp_header(3, 4096, 4096, 5))
    write("tcp_wire", "write", prefix(False, 9, 65536) + tcp_header(2, 65536, 65536, 9, 0x7f0000002000) +
          tcp_header(4, 0, 65536, 9))
    write("tcp_wire", "error", prefix(True, 3, 8) + tcp_header(3, 20, 0, 3, status=4))
    # RUNS requests: a read of three scattered runs and its answer; a write of
    # two runs and its answer; a refused frame; a table that does not add up.
    reads = [(0x7f0000001000, 4096), (0x7f0000009003, 1), (0x7f0000004000, 32768)]
    size = sum(n for _, n in reads)
    write("tcp_wire", "read-runs", prefix(True, 11, size, True) +
          tcp_header(5, 16 * len(reads), size, 11, len(reads)) + tcp_run_table(reads) +
          tcp_header(7, size, size, 11))
    writes = [(0x7f0000020000, 65536), (0x7f0000010005, 4095)]
    size = sum(n for _, n in writes)
    write("tcp_wire", "write-runs", prefix(False, 12, size, True) +
          tcp_header(6, 16 * len(writes) + size, size, 12, len(writes)) + tcp_run_table(writes) +
          tcp_header(8, 0, size, 12))
    write("tcp_wire", "refused-runs", prefix(True, 13, 8192, True) + tcp_header(7, 60, 0, 13, status=4))
    write("tcp_wire", "bad-run-table", prefix(True, 14, 100, True) +
          tcp_header(5, 32, 100, 14, 2) + tcp_run_table([(0x1000, 50), (0x2000, 49)]))
    # Version 2: bound to registration 7 (its number follows the header).
    seq = struct.pack("<Q", 7)
    write("tcp_wire", "bound-read", prefix(True, 15, 4096) +
          tcp_header(1, 8, 4096, 15, 0x7f0000001000, version=2) + seq + tcp_header(3, 4096, 4096, 15))
    write("tcp_wire", "bound-write-runs", prefix(False, 16, size, True) +
          tcp_header(6, 8 + 16 * len(writes) + size, size, 16, len(writes), version=2) + seq +
          tcp_run_table(writes) + tcp_header(8, 0, size, 16))


NIC = {"name": "rxe0", "link_layer": "eth", "gid": "fe80:0000:0000:0000:0242:acff:fe11:0002", "lid": 0,
       "numa": 0, "mtu": 1024, "up": True}


def memory_descriptor():
    return {
        "version": "1.0", "kind": "memory", "name": "127.0.0.1:5000", "host": "127.0.0.1", "rpc_port": 5000,
        "host_id": "0b3c6f2e-boot", "server_name": "node-a", "pid": 4242, "generation": 3,
        "transports": {"tcp": {}, "rdma": {"instance": "a1b2c3", "nics": [NIC]},
                       "shm": {"version": 3, "pid": 4242, "nonce": 99, "probe": 140000000,
                               "socket": "@hawser-shm-00000000deadbeef"}},
        "buffers": [
            {"addr": 140000000000, "length": 1048576, "location": "cpu:0",
             "attrs": {"rdma": {"lkey": [17], "rkey": [18]}}},
            {"addr": 140000000000 + 2097152, "length": 4096, "location": "cuda:0",
             "attrs": {"nvlink": {"handle": "ab" * 64, "base": 140000000000 + 2097152, "size": 2097152,
                                  "offset": 0, "bus": "0000:3b:00.0", "slot": 0, "gen": 1}}},
        ],
    }


def file_descriptor(name="ckpt"):
    return {"version": "1.0", "kind": "file", "name": name,
            "files": [{"file_path": "/data/a", "length": 1 << 20, "local_path_map": {"node-a": "/mnt/a"}},
                      {"file_path": "/data/b", "length": 4096, "local_path_map": {}}]}


def descriptor():
    write("descriptor", "memory", json.dumps(memory_descriptor()))
    write("descriptor", "file", json.dumps(file_descriptor()))


def peer_descriptor():
    # A descriptor as a peer publishes it, with every transport's part: each
    # built-in transport's decoder reads its own (tests/fuzz/peer_descriptor_fuzz.cpp).
    d = memory_descriptor()
    d["transports"]["tcp"] = {"version": 2, "max_frame": 67108864, "max_runs": 1024, "gpu": True}
    d["transports"]["nvlink"] = {"pid": 4242, "start": 123456, "pidns": 4026531836, "table_fd": 9,
                                 "socket": "@hawser-nvlink-00000000deadbeef", "nonce": 77, "readers": 64}
    d["buffers"].append({"addr": 140000000000 + 8388608, "length": 65536, "location": "cuda:1",
                         "attrs": {"nvlink": {"vmm": 5, "base": 140000000000 + 8388608, "size": 2097152,
                                              "bus": "0000:5e:00.0", "slot": 1, "gen": 2},
                                   "shm": {"gen": 4, "shared": True}}})
    write("peer_descriptor", "memory", json.dumps(d))
    old = memory_descriptor()  # a peer of an older release: tcp publishes nothing, no nvlink socket
    old["transports"]["nvlink"] = {"pid": 4242, "start": 1, "pidns": 7, "table_fd": 3}
    write("peer_descriptor", "older-peer", json.dumps(old))
    write("peer_descriptor", "file", json.dumps(file_descriptor()))


def b64(s):
    import base64
    return base64.b64encode(s.encode()).decode()


def kv(key, value, rev=5):
    return {"key": b64(key), "value": b64(value), "create_revision": str(rev), "mod_revision": str(rev),
            "version": "1", "lease": "7587"}


def etcd_reply():
    # [HTTP status index: 0 = 200, 3 = 400, 5 = 500] [body]
    header = {"cluster_id": "1", "member_id": "2", "revision": "12", "raft_term": "2"}
    write("etcd_reply", "range", b"\0" + json.dumps({"header": header, "kvs": [kv("/hawser/segments/a", "{}")],
                                                    "count": "1"}).encode())
    write("etcd_reply", "txn", b"\0" + json.dumps({"header": header, "succeeded": False, "responses": [
        {"response_range": {"header": header, "kvs": [kv("/hawser/files/b", "x")], "count": "1"}},
        {"response_delete_range": {"header": header, "deleted": "1"}}]}).encode())
    write("etcd_reply", "lease", b"\0" + json.dumps({"header": header, "ID": "7587", "TTL": "10",
                                                    "result": {"ID": "7587", "TTL": "9"}}).encode())
    write("etcd_reply", "refused", b"\3" + json.dumps({"error": "etcdserver: requested lease not found",
                                                      "code": 5, "message": "requested lease not found"}).encode())
    write("etcd_reply", "stream-error", b"\0" + json.dumps({"error": {"grpc_code": 14, "http_code": 503,
                                                                     "message": "no leader", "code": 14}}).encode())


def etcd_watch():
    # [chunk size byte] [newline-delimited JSON]
    header = {"revision": "20"}
    lines = [
        {"result": {"header": header, "created": True}},
        {"result": {"header": header, "events": [{"kv": kv("/hawser/segments/a", "{}", 20)},
                                                 {"type": "DELETE", "kv": {"key": b64("/hawser/segments/b"),
                                                                           "mod_revision": "21"}}]}},
    ]
    body = "\n".join(json.dumps(x) for x in lines) + "\n"
    write("etcd_watch", "events", b"\x07" + body.encode())
    write("etcd_watch", "compacted", b"\x03" + (json.dumps({"result": {"header": header, "compact_revision": "15",
                                                                       "canceled": True}}) + "\n").encode())
    write("etcd_watch", "error", b"\x00" + (json.dumps({"error": {"grpc_code": 1, "message": "canceled"}}) +
                                            "\r\n").encode())


def rdma_handshake():
    qps = {"qpn": [17, 18], "psn": [1234, 99999], "gid": NIC["gid"], "lid": 0, "mtu": 1024}
    req = {"v": 1, "from": "127.0.0.1:5000", "instance": "a1b2c3", "key": "rxe0>rxe0", "local_nic": "rxe0",
           "peer_nic": "rxe0", "peer_instance": "d4e5f6", "link_layer": "eth", **qps}
    write("rdma_handshake", "request", json.dumps(req))
    write("rdma_handshake", "reply", json.dumps({"nic": "rxe0", **qps}))


def file_segments():
    write("file_segments", "two", json.dumps({"version": "1.0", "segments": [file_descriptor("ckpt"),
                                                                           file_descriptor("logs")]}, indent=2))


def config():
    # [knob index byte] [value, or an environment block: NAME=VALUE\0...]
    write("config", "size", b"\x02" + b"64K")
    write("config", "env", b"\x00" + b"HAWSER_TCP_CONNECTIONS=4\0HAWSER_LOG_LEVEL=warn\0HAWSER_OTHER=1")
    write("config", "bool", b"\x10" + b"on")


def shm_table():
    # [addr u64] [len u64] [nonce u64] [table: header + entries {addr, length, gen, 0}]
    nonce = 0x1234
    header = struct.pack("<QIIQQQQQQ", SHM_MAGIC, SHM_VERSION, SHM_CAPACITY, nonce, 2, 2, 0, 0, 0)
    entries = struct.pack("<QQQQQQQQ", 0x10000, 0x1000, 1, 0, 0x20000, 0x8000, 2, 0)  # addr, length, gen, 0
    write("shm_table", "inside", struct.pack("<QQQ", 0x20100, 0x100, nonce) + header + entries)
    write("shm_table", "outside", struct.pack("<QQQ", 0x10f00, 0x200, nonce) + header + entries)


if __name__ == "__main__":
    for f in (rpc, rpc_partial, tcp_wire, descriptor, peer_descriptor, etcd_reply, etcd_watch, rdma_handshake, file_segments, config,
              shm_table):
        f()
