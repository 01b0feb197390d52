"""The states a power cut may leave, built from the replayed model.

A state is a choice per *item* (a file or a directory with operations not
yet made durable by an fsync) of what reached the disk:

- a file: ``("S",)`` its last-fsynced content, ``("C",)`` every pending
  operation too, ``("P", j)`` the first ``j`` of them, ``("T", j, cut)`` the
  first ``j`` and the next one (a write) torn at ``cut``, a 512-byte
  boundary (the file ends there if that write extended it), ``("Z", j,
  cut)`` the same write whole in length but zeros from ``cut`` on (the
  size reached the disk, the data did not), ``("H", j, cut)`` zeros before
  ``cut`` and the data after it (sectors written out of order);
- a directory: ``("P", j)``: the first ``j`` entry changes since its last
  fsync (0: as of that fsync; all: as it is now).

Items not named in a choice take the state's *base*: ``"S"`` (dropped) or
``"C"`` (kept). :func:`variants` lists the choices tried at a crash point;
:func:`build` turns one into a tree (``{relative path: bytes, or None for a
directory}``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .vfs import ROOT, SECTOR, Model, apply_dir_ops, apply_ops

__all__ = ["Item", "Choice", "variants", "build", "describe_choice", "fingerprint"]

#: ("f", file node) or ("d", dir node)
Item = tuple[str, int]
#: (name of the variant, {item: option}, base "S" or "C")
Choice = tuple[str, dict[Item, tuple], str]


def _file_image(model: Model, fid: int, opt: tuple) -> bytes:
    f = model.files[fid]
    kind = opt[0]
    if kind == "S" or not f.pending:
        return f.synced
    if kind == "C":
        return apply_ops(f.synced, f.pending)
    j = opt[1]
    base = apply_ops(f.synced, f.pending[:j])
    if kind == "P":
        return base
    _, off, data = f.pending[j]
    cut = opt[2]
    k = cut - off  # bytes of the write before the cut
    if kind == "T":
        return apply_ops(base, [("w", off, data[:k])])
    if kind == "Z":
        return apply_ops(base, [("w", off, data[:k] + bytes(len(data) - k))])
    # "H": the sectors after the cut made it, the ones before did not
    old = base[off:off + k]
    head = old + bytes(k - len(old))
    return apply_ops(base, [("w", off, head + data[k:])])


def _dir_entries(model: Model, did: int, opt: tuple) -> dict[str, int]:
    d = model.dirs[did]
    if not d.pending:
        return d.synced
    n = {"S": 0, "C": len(d.pending)}.get(opt[0], opt[-1])
    return apply_dir_ops(d.synced, d.pending[:n])


def build(model: Model, choice: Choice) -> dict[str, bytes | None]:
    """The tree a power cut leaves under ``choice``."""
    _, opts, base = choice
    base_opt = (base,)
    tree: dict[str, bytes | None] = {}
    images: dict[int, bytes] = {}

    def walk(did: int, prefix: str, depth: int) -> None:
        entries = _dir_entries(model, did, opts.get(("d", did), base_opt))
        for name, node in entries.items():
            path = prefix + name
            if node in model.dirs:
                tree[path] = None
                if depth < 16:
                    walk(node, path + "/", depth + 1)
            else:
                img = images.get(node)
                if img is None:
                    img = images[node] = _file_image(model, node, opts.get(("f", node), base_opt))
                tree[path] = img

    walk(ROOT, "", 0)
    return tree


def fingerprint(tree: dict[str, bytes | None]) -> int:
    return hash(tuple(sorted(tree.items(), key=lambda kv: kv[0])))


def _cuts(off: int, length: int, most: int) -> list[int]:
    """512-byte boundaries strictly inside the write [off, off + length): at most ``most``."""
    first = (off // SECTOR + 1) * SECTOR
    cuts = list(range(first, off + length, SECTOR))
    if len(cuts) > most:
        keep = {cuts[0], cuts[-1], cuts[len(cuts) // 2]}
        cuts = sorted(keep)[:most]
    return cuts


def reachable(model: Model) -> tuple[set[int], set[int]]:
    """Files and directories reachable now or as of the last fsyncs
    (what a state can hold)."""
    files: set[int] = set()
    dirs: set[int] = set()
    todo = [ROOT]
    while todo:
        did = todo.pop()
        if did in dirs:
            continue
        dirs.add(did)
        d = model.dirs[did]
        for entries in (d.synced, d.live, *([apply_dir_ops(d.synced, d.pending[:j]) for j in range(1, len(d.pending))]
                                            if len(d.pending) > 1 else [])):
            for node in entries.values():
                if node in model.dirs:
                    todo.append(node)
                else:
                    files.add(node)
    return files, dirs


def variants(model: Model, rng: random.Random, randoms: int = 2, torn: int = 3, prefixes: int = 4) -> Iterator[Choice]:
    """The choices tried at a crash point (duplicates are left to the caller)."""
    files, dirs = reachable(model)
    dirty_files = sorted(f for f in files if model.files[f].pending)
    dirty_dirs = sorted(d for d in dirs if model.dirs[d].pending)
    yield ("synced", {}, "S")
    if not dirty_files and not dirty_dirs:
        return
    yield ("kept", {}, "C")
    for fid in dirty_files:
        item = ("f", fid)
        yield ("file kept", {item: ("C",)}, "S")
        yield ("file dropped", {item: ("S",)}, "C")
        pending = model.files[fid].pending
        if len(pending) > 1:
            for j in range(1, min(len(pending), prefixes + 1)):
                yield ("file prefix", {item: ("P", j)}, "C")
        last = max((j for j, op in enumerate(pending) if op[0] == "w"), default=None)
        if last is None:
            continue
        _, off, data = pending[last]
        cuts = _cuts(off, len(data), torn)
        for cut in cuts:
            yield ("torn", {item: ("T", last, cut)}, "C")
            yield ("torn, rest dropped", {item: ("T", last, cut)}, "S")
            yield ("sector head lost", {item: ("H", last, cut)}, "C")
        for cut in [off, *cuts]:
            yield ("zero tail", {item: ("Z", last, cut)}, "C")
    for did in dirty_dirs:
        item = ("d", did)
        n = len(model.dirs[did].pending)
        yield ("dir kept", {item: ("P", n)}, "S")
        yield ("dir dropped", {item: ("P", 0)}, "C")
        for j in range(1, min(n, prefixes + 1)):
            yield ("dir prefix", {item: ("P", j)}, "C")
    items: list[tuple[Item, int]] = [(("f", f), 0) for f in dirty_files] + [(("d", d), 0) for d in dirty_dirs]
    if len(items) > 1:
        for _ in range(randoms):
            opts = {}
            for item, _ in items:
                if item[0] == "f":
                    opts[item] = rng.choice([("S",), ("C",)])
                else:
                    opts[item] = ("P", rng.randint(0, len(model.dirs[item[1]].pending)))
            yield ("random", opts, "S")


def describe_choice(model: Model, choice: Choice) -> list[str]:
    """What the state lost, one line per item not kept whole."""
    _, opts, base = choice
    files, dirs = reachable(model)
    out = []
    for fid in sorted(f for f in files if model.files[f].pending):
        opt = opts.get(("f", fid), (base,))
        if opt[0] == "C":
            continue
        f = model.files[fid]
        path = model.path_of(fid)
        pend = f.pending
        if opt[0] == "S":
            out.append(f"{path}: unsynced {_ops_text(pend)} lost")
        elif opt[0] == "P":
            out.append(f"{path}: unsynced {_ops_text(pend[opt[1]:])} lost (the first {opt[1]} kept)")
        else:
            j, cut = opt[1], opt[2]
            what = {"T": f"torn at byte {cut} (the file ends there)",
                    "Z": f"zeros from byte {cut} (its length kept)",
                    "H": f"zeros before byte {cut}, data after it (sectors out of order)"}[opt[0]]
            rest = f", then {_ops_text(pend[j + 1:])} lost" if pend[j + 1:] else ""
            out.append(f"{path}: unsynced write [{pend[j][1]}, {pend[j][1] + len(pend[j][2])}) {what}{rest}")
    for did in sorted(d for d in dirs if model.dirs[d].pending):
        d = model.dirs[did]
        opt = opts.get(("d", did), (base,))
        n = {"S": 0, "C": len(d.pending)}.get(opt[0], opt[-1])
        if n == len(d.pending):
            continue
        path = model.path_of(did)
        lost = ", ".join(_dir_op_text(model, op) for op in d.pending[n:])
        out.append(f"directory {path}: not durable (no fsync of the directory since): {lost}")
    return out


def _ops_text(ops: list[tuple]) -> str:
    parts = []
    for op in ops:
        if op[0] == "w":
            parts.append(f"write [{op[1]}, {op[1] + len(op[2])})")
        else:
            parts.append(f"truncate to {op[1]}")
    return ", ".join(parts) if len(parts) <= 4 else f"{', '.join(parts[:3])} and {len(parts) - 3} more"


def _dir_op_text(model: Model, op: tuple) -> str:
    if op[0] == "set":
        kind = "mkdir" if op[2] in model.dirs else "create/rename to"
        return f"{kind} {op[1]}"
    if op[0] == "del":
        return f"unlink {op[1]}"
    return f"rename {op[1]} -> {op[2]}"
