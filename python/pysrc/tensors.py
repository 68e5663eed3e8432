"""hawser.tensors: tensors and arrays as first-class transfer operands.

Anything that holds memory is accepted without the caller computing an
address: PyTorch tensors (CPU, pinned, CUDA; any dtype), objects exposing
``__cuda_array_interface__`` (CuPy, Numba, ...), DLPack (``__dlpack__``) or
the buffer protocol (numpy, bytearray, memoryview, array.array). Where the
memory lives (host, which GPU) is found by the engine (location ``"*"``).

The TransferEngine methods this module adds (docs/python.md "Tensors"):

    register_tensor(obj, remote_accessible=True)
    unregister_tensor(obj)
    transfer_tensor(target, obj, remote, opcode, index=None, sync=True)
    transfer_tensor_blocks(target, obj, block_ids, remote, remote_block_ids, opcode, sync=True)

and the module functions describe(obj) / tensor_desc(obj) (what a peer needs
to address this tensor: a dict of ints, strs and tuples, picklable and JSON
friendly) and runs(obj) (the contiguous byte runs of a view).
"""

_np = None


def _numpy():
    """numpy when installed (vectorised address arithmetic), else None."""
    global _np
    if _np is None:
        try:
            import numpy
            _np = numpy
        except ImportError:
            _np = False
    return _np or None


_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_CUDA_MANAGED = 1, 2, 3, 13


def _is_torch_tensor(obj):
    t = type(obj)
    return t.__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "element_size")


def describe(obj):
    """The memory of `obj` as a dict:

    addr      address of its first element (int)
    nbytes    bytes from addr to the end of its last element (its span)
    itemsize  bytes per element
    shape     tuple of ints
    strides   tuple of ints, in bytes
    location  "cpu" or "cuda:N" when the object says; "*" when only the
              engine can tell (asked at registration)
    contiguous  True when the span holds exactly its elements in row-major order

    Raises TypeError for an object that exposes no memory, ValueError for
    negative strides (a flipped view: copy it first).
    """
    if isinstance(obj, dict) and "addr" in obj and "shape" in obj:
        return obj  # already a description (a peer's, say)
    if _is_torch_tensor(obj):
        itemsize = int(obj.element_size())
        shape = tuple(int(s) for s in obj.shape)
        strides = tuple(int(s) * itemsize for s in obj.stride())
        dev = obj.device
        location = f"cuda:{dev.index if dev.index is not None else 0}" if dev.type == "cuda" else (
            "cpu" if dev.type == "cpu" else "*")
        return _finish(int(obj.data_ptr()), itemsize, shape, strides, location)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        typestr = cai["typestr"]
        itemsize = int(typestr[2:])
        shape = tuple(int(s) for s in cai["shape"])
        strides = cai.get("strides")
        if strides is None:
            strides = _row_major(shape, itemsize)
        return _finish(int(cai["data"][0]), itemsize, shape, tuple(int(s) for s in strides), "*")
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__") and not _has_buffer(obj):
        dev_type, dev_id = obj.__dlpack_device__()
        info = _hawser._dlpack_info(obj.__dlpack__())
        if dev_type == _DLPACK_CUDA:
            location = f"cuda:{info['device_id']}"
        elif dev_type == _DLPACK_CPU:
            location = "cpu"
        else:
            location = "*"  # pinned or managed memory: the engine asks the driver
        return _finish(info["addr"], info["itemsize"], info["shape"], info["strides"], location)
    if _has_buffer(obj):
        info = _hawser._buffer_info(obj)
        return _finish(info["addr"], info["itemsize"], info["shape"], info["strides"], "cpu")
    raise TypeError(f"{type(obj).__name__} exposes no memory (a torch tensor, __cuda_array_interface__, "
                    f"__dlpack__ or the buffer protocol is needed)")


tensor_desc = describe


def _has_buffer(obj):
    try:
        memoryview(obj).release()
        return True
    except TypeError:
        return False


def _row_major(shape, itemsize):
    strides, step = [], itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def _finish(addr, itemsize, shape, strides, location):
    if any(st < 0 for st in strides):
        raise ValueError("a view with negative strides is not supported: copy it first (.contiguous())")
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        nbytes = 0
    else:
        nbytes = sum((s - 1) * st for s, st in zip(shape, strides)) + itemsize
    contiguous = numel == 0 or all(
        s == 1 or st == rm for s, st, rm in zip(shape, strides, _row_major(shape, itemsize)))
    return {"addr": int(addr), "nbytes": int(nbytes), "itemsize": int(itemsize), "shape": tuple(shape),
            "strides": tuple(strides), "location": location, "contiguous": bool(contiguous)}


def runs(obj):
    """(offsets, run_length): the contiguous byte runs of `obj` as offsets
    from its address (a list, or a numpy int64 array when numpy is there) and
    the length of each. One run for a contiguous object."""
    d = describe(obj)
    if d["nbytes"] == 0:
        return [], 0
    shape, strides, itemsize = list(d["shape"]), list(d["strides"]), d["itemsize"]
    # Fold the innermost dimensions that continue one another into one run.
    run = itemsize
    while shape and (shape[-1] == 1 or strides[-1] == run):
        run *= shape[-1]
        shape.pop()
        strides.pop()
    np = _numpy()
    if np is not None:
        offsets = np.zeros(1, dtype=np.int64)
        for s, st in zip(shape, strides):
            offsets = (offsets[:, None] + np.arange(s, dtype=np.int64)[None, :] * st).reshape(-1)
        return offsets, run
    offsets = [0]
    for s, st in zip(shape, strides):
        offsets = [o + i * st for o in offsets for i in range(s)]
    return offsets, run


def _ids(ids, limit, what):
    """Block ids from an index tensor (any device, any integer dtype), a
    numpy array or a sequence, checked against `limit`."""
    if _is_torch_tensor(ids):
        ids = ids.detach().to("cpu").reshape(-1).tolist()
    np = _numpy()
    if np is not None:
        arr = np.asarray(ids).reshape(-1)
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"{what}: integer block ids are needed, not {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        bad = np.nonzero((arr < 0) | (arr >= limit))[0]
        if bad.size:
            raise IndexError(f"{what}[{int(bad[0])}] = {int(arr[bad[0]])} is outside 0..{limit - 1}")
        return arr
    out = [int(i) for i in ids]
    for k, i in enumerate(out):
        if not 0 <= i < limit:
            raise IndexError(f"{what}[{k}] = {i} is outside 0..{limit - 1}")
    return out


def _block_layout(d, what):
    """(base, block_stride, block_bytes, num_blocks) of a cache laid out as
    blocks along its first dimension, each block contiguous."""
    if len(d["shape"]) < 1:
        raise ValueError(f"{what}: a tensor with a block dimension (dim 0) is needed")
    inner_shape, inner_strides = d["shape"][1:], d["strides"][1:]
    block_bytes = d["itemsize"]
    for s in inner_shape:
        block_bytes *= s
    expect = _row_major(inner_shape, d["itemsize"])
    if any(s != 1 and st != e for s, st, e in zip(inner_shape, inner_strides, expect)):
        raise ValueError(f"{what}: each block (tensor[i]) must be contiguous")
    return d["addr"], d["strides"][0], block_bytes, d["shape"][0]


def _norm(v):
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _opcode(op):
    op = int(op)
    if op not in (0, 1):
        raise ValueError(f"opcode {op} is neither TransferOpcode.Read (0) nor TransferOpcode.Write (1)")
    return op


def _kept(engine):
    try:
        return engine._hawser_tensors
    except AttributeError:
        engine._hawser_tensors = {}
        return engine._hawser_tensors


def register_tensor(self, obj, remote_accessible=True):
    """Registers the memory of `obj` (its whole span; the engine finds where
    it lives) and keeps `obj` alive until unregister_tensor. 0 or a negative
    code, as register_memory."""
    d = describe(obj)
    rc = self.register_memory(d["addr"], d["nbytes"], "*", remote_accessible)
    if rc == 0:
        _kept(self)[d["addr"]] = obj
    return rc


def unregister_tensor(self, obj):
    """Unregisters what register_tensor(obj) registered. 0 or a negative code."""
    d = describe(obj)
    rc = self.unregister_memory(d["addr"])
    if rc == 0:
        _kept(self).pop(d["addr"], None)
    return rc


def _post(self, target, local, remote, length, op, sync, notify=None):
    """One transfer of blocks local[i] <-> remote[i] of `length` bytes each;
    then `notify` (sync only), once every byte is in place."""
    if notify is not None:
        if not sync:
            raise ValueError("notify= needs sync=True")
        rc = _post(self, target, local, remote, length, op, True)
        return rc if rc != 0 else self.batch_transfer_sync(target, [], [], [], op, notify)
    np = _numpy()
    n = len(local)
    if n == 1:
        args = (target, [int(local[0])], [int(remote[0])], [int(length)])
        if sync:
            return self.batch_transfer_sync(*args, op)
        return self.batch_transfer_async(*args, op)
    if np is not None:
        local = np.ascontiguousarray(local, dtype=np.uint64)
        remote = np.ascontiguousarray(remote, dtype=np.uint64)
    if sync:
        return self.transfer_blocks_sync(target, local, remote, int(length), op)
    return self.transfer_blocks_async(target, local, remote, int(length), op)


def transfer_tensor(self, target_hostname, obj, remote, opcode, index=None, sync=True, notify=None):
    """Moves the bytes of tensor `obj` (or of its view obj[index]) to (Write)
    or from (Read) the peer `target_hostname`.

    remote: the peer tensor's describe() dict (sent over by the peer), or the
    int address where the moved view starts at the peer. With `index`, the
    same index is applied to both sides (the peer tensor has the same shape,
    strides and itemsize). A non-contiguous view moves as one block request
    of its contiguous runs, each landing at the same offset at the peer.
    sync=True: 0 or a negative code; sync=False: a batch id (0 = failed).
    notify (sync only): a TransferNotify or (name, msg) the peer receives once
    every byte is in place, never when the transfer failed."""
    op = _opcode(opcode)
    whole = describe(obj)
    view = describe(obj[index]) if index is not None else whole
    if isinstance(remote, int):
        remote_addr = remote
    else:
        rd = describe(remote)
        if index is not None or not (whole["contiguous"] and rd["contiguous"]):
            for k in ("shape", "strides", "itemsize"):
                if _norm(rd[k]) != _norm(whole[k]):
                    raise ValueError(f"transfer_tensor: the peer tensor's {k} {rd[k]} differs from {whole[k]}")
        elif rd["nbytes"] != whole["nbytes"]:
            raise ValueError(f"transfer_tensor: the peer tensor has {rd['nbytes']} bytes, this one {whole['nbytes']}")
        remote_addr = rd["addr"] + (view["addr"] - whole["addr"])
    offsets, run = runs(view)
    if run == 0:
        return self.batch_transfer_sync(target_hostname, [], [], [], op, notify) if sync else \
            self.batch_transfer_async(target_hostname, [], [], [], op)
    np = _numpy()
    if np is not None:
        offsets = np.asarray(offsets, dtype=np.int64)
        local = offsets + view["addr"]
        remote_addrs = offsets + remote_addr
    else:
        local = [o + view["addr"] for o in offsets]
        remote_addrs = [o + remote_addr for o in offsets]
    return _post(self, target_hostname, local, remote_addrs, run, op, sync, notify)


def block_addresses(obj, block_ids, what="block_ids"):
    """(addresses, block_bytes) of blocks `block_ids` of a paged cache `obj`
    (blocks along dim 0, each contiguous), or of a list of such caches (one
    per layer: the addresses of every layer's blocks, layer after layer).
    `obj` may be a describe() dict (a peer's cache)."""
    layers = obj if isinstance(obj, (list, tuple)) else [obj]
    np = _numpy()
    parts, block_bytes = [], None
    for k, layer in enumerate(layers):
        base, stride, nbytes, count = _block_layout(describe(layer), f"layer {k}")
        if block_bytes is not None and nbytes != block_bytes:
            raise ValueError(f"layer {k}: blocks of {nbytes} bytes, layer 0 has {block_bytes}")
        block_bytes = nbytes
        ids = _ids(block_ids, count, what)
        if np is not None:
            parts.append(ids * stride + base)
        else:
            parts.append([base + i * stride for i in ids])
    if np is not None:
        return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), block_bytes
    return [a for p in parts for a in p], block_bytes


def transfer_tensor_blocks(self, target_hostname, obj, block_ids, remote, remote_block_ids, opcode, sync=True,
                           notify=None):
    """Moves blocks of a paged KV cache as one request: block block_ids[i]
    of `obj` <-> block remote_block_ids[i] of the peer's cache `remote`.

    obj: a tensor whose dim 0 is the block (each block contiguous), or a
    list of them (one per layer, K and V: the same ids in every one).
    remote: the peer's describe() dict(s), as many as `obj` has tensors.
    block_ids / remote_block_ids: index tensors (a block table's rows, any
    integer dtype, on any device), numpy arrays or lists, of equal length.
    sync=True: 0 or a negative code; sync=False: a batch id (0 = failed).
    notify: as transfer_tensor's."""
    op = _opcode(opcode)
    layers = obj if isinstance(obj, (list, tuple)) else [obj]
    remotes = remote if isinstance(remote, (list, tuple)) else [remote]
    if len(layers) != len(remotes):
        raise ValueError(f"transfer_tensor_blocks: {len(layers)} local tensors, {len(remotes)} remote")
    local, lb = block_addresses(layers, block_ids, "block_ids")
    peer, rb = block_addresses(remotes, remote_block_ids, "remote_block_ids")
    if len(local) != len(peer):
        raise ValueError(f"transfer_tensor_blocks: {len(local) // max(len(layers), 1)} block ids, "
                         f"{len(peer) // max(len(layers), 1)} remote block ids")
    if len(local) and lb != rb:
        raise ValueError(f"transfer_tensor_blocks: local blocks of {lb} bytes, remote blocks of {rb}")
    if not len(local):
        return self.batch_transfer_sync(target_hostname, [], [], [], op, notify) if sync else \
            self.batch_transfer_async(target_hostname, [], [], [], op)
    return _post(self, target_hostname, local, peer, lb, op, sync, notify)


for _name in ("register_tensor", "unregister_tensor", "transfer_tensor", "transfer_tensor_blocks"):
    setattr(_hawser.TransferEngine, _name, globals()[_name])
_hawser.tensor_desc = describe
del _name
