"""What the benchmarks share: comma-separated list options, the machine's description, the
JSON report, and kernel counts (kinds by name; per loop iteration in a compiled program)."""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import platform
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax

import games
from azjax import parallel


def int_list(text: str) -> list[int]:
    """An argparse type: "1,1024,4096" -> [1, 1024, 4096], every value positive."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def game_list(text: str) -> list[str]:
    """An argparse type: "connect4,othello" -> registered game names."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = sorted(set(names) - set(games.names()))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown game(s) {', '.join(unknown) or text!r}; expected {', '.join(games.names())}"
        )
    return names


def choice_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated values, each one of `choices`."""

    def parse(text: str) -> list[str]:
        values = [x.strip() for x in text.split(",") if x.strip()]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated values of {', '.join(choices)}, got {text!r}"
            )
        return values

    return parse


def net_list(text: str) -> list[tuple[int, int]]:
    """An argparse type: "2x32,6x128" -> [(2, 32), (6, 128)], BLOCKSxCHANNELS with blocks >= 0
    and channels >= 1."""
    nets = [re.fullmatch(r"(\d+)x(0*[1-9]\d*)", x.strip()) for x in text.split(",") if x.strip()]
    if not nets or None in nets:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated BLOCKSxCHANNELS such as 2x32 (channels >= 1), got {text!r}"
        )
    return [(int(m[1]), int(m[2])) for m in nets]


def device_description() -> dict[str, Any]:
    """The accelerator (or CPU) the figures come from, and the host."""
    device = jax.devices()[0]
    cpu = platform.processor() or platform.machine()
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "platform": device.platform,
        "device": device.device_kind,
        "num_devices": jax.device_count(),
        "cpu": cpu,
        "cpu_count": parallel.cpu_cores(),
        "jax_version": jax.__version__,
    }


def write_report(path: str, report: dict[str, Any]) -> None:
    """Write `report` as JSON to `path`, creating its folder."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


# Kernel kinds by name (XLA's fusion names and the GPU libraries' kernel names), first match wins.
KERNEL_KINDS = (
    ("conv/matmul", ("convolution", "cudnn", "cutlass", "xmma", "gemm", "fprop", "dot", "matmul")),
    ("scatter", ("scatter", "dynamic_update_slice", "dynamic-update-slice")),
    ("gather", ("gather", "dynamic_slice", "dynamic-slice")),
    ("reduce", ("reduce", "argmax", "argmin")),
    ("sort", ("sort", "topk", "top_k")),
    ("copy", ("copy", "memcpy", "memset", "transpose")),
)


def kernel_kind(name: str) -> str:
    lower = name.lower()
    for kind, words in KERNEL_KINDS:
        if any(w in lower for w in words):
            return kind
    return "other fusion"


# Instructions that launch nothing: they name, pack or reinterpret buffers.
FREE_OPS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
# What marks the heavy work (a network): XLA's own convolutions and dots, or library calls.
HEAVY_OPS = frozenset({"convolution", "dot", "custom-call"})
_HEADER = re.compile(r"(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_CALLEES = re.compile(
    r"\b(condition|body|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)"
    r"|\b(branch_computations|called_computations)=\{([^}]*)\}"
)
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_FRAME = re.compile(r"\bstack_frame_id=(\d+)")
_TABLE_ROW = re.compile(r"(\d+) (.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")

Instructions = dict[str, list[tuple[str, str]]]  # computation -> [(opcode, rest of line)]


def _skip_shape(text: str) -> str:
    """`text` after its leading shape (an array's, or a tuple's in nested parentheses)."""
    if not text.startswith("("):
        return text.partition(" ")[2]
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return text[i + 1 :]
    return ""


def parse_hlo(text: str) -> Instructions:
    """A compiled program's text as computation name -> [(opcode, the rest of the line)]."""
    computations: Instructions = {}
    current = None
    for line in text.splitlines():
        if not line.startswith(" ") and (header := _HEADER.match(line)):
            current = computations.setdefault(header.group(1), [])
        elif line.startswith("}"):
            current = None
        elif current is not None and (start := _INSTRUCTION.match(line)):
            rest = _skip_shape(line[start.end() :])
            if opcode := _OPCODE.match(rest):
                current.append((opcode.group(1), rest[opcode.end() :]))
    return computations


def _callees(rest: str) -> dict[str, list[str]]:
    """The computations an instruction calls, by role (body, condition, calls, branches...)."""
    roles: dict[str, list[str]] = collections.defaultdict(list)
    for role, name, group, names in _CALLEES.findall(rest):
        for callee in [name] if role else names.split(","):
            roles[role or group].append(callee.strip().lstrip("%"))
    return roles


def _reachable(computations: Instructions, name: str) -> set[str]:
    """`name` and every computation it calls, directly or not."""
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in computations:
            continue
        seen.add(current)
        for _, rest in computations[current]:
            todo.extend(c for group in _callees(rest).values() for c in group)
    return seen


def _count(
    computations: Instructions, name: str, frames: dict[int, str]
) -> tuple[collections.Counter, int]:
    """Kernels of one pass through `name` by (kind, where: `frames`' label of the kernel's
    stack frame, "?" where it has none), and how many of them are in loops with no known trip
    count (counted for one iteration)."""
    kernels: collections.Counter = collections.Counter()
    unbounded = 0
    for opcode, rest in computations[name]:
        callees = _callees(rest)
        if opcode in FREE_OPS:
            continue
        if opcode == "while":  # n iterations where XLA knows n (n + 1 tests), else one
            trips = _TRIP_COUNT.search(rest)
            n = int(trips.group(1)) if trips else 1
            for part, repeats in [(c, n + bool(trips)) for c in callees["condition"]] + [
                (c, n) for c in callees["body"]
            ]:
                part_kernels, part_unbounded = _count(computations, part, frames)
                kernels += collections.Counter({k: v * repeats for k, v in part_kernels.items()})
                unbounded += part_unbounded * repeats if trips else part_kernels.total() * repeats
        elif opcode in ("conditional", "call"):  # a call's callee; a conditional's largest branch
            parts = callees["to_apply"] or [
                c
                for role in ("true_computation", "false_computation", "branch_computations")
                for c in callees[role]
            ]
            part_kernels, part_unbounded = max(
                (_count(computations, part, frames) for part in parts), key=lambda c: c[0].total()
            )
            kernels += part_kernels
            unbounded += part_unbounded
        else:  # one kernel, named by its opcode, what it fuses, or the library it calls
            fused = [op for c in callees["calls"] for op, _ in computations.get(c, [])]
            target = _TARGET.search(rest)
            kind = kernel_kind(" ".join([opcode, *fused, target.group(1) if target else ""]))
            frame = _FRAME.search(rest)
            kernels[kind, frames.get(int(frame.group(1)), "?") if frame else "?"] += 1
    return kernels, unbounded


def stack_frames(text: str, own: tuple[str, ...] = ("azjax", "games")) -> dict[int, str]:
    """A compiled program's stack frames (the tables at the head of its text: `FileNames`,
    `FunctionNames`, `FileLocations`, `StackFrames`) as frame id -> "package/file.py:function"
    of the innermost frame in one of the `own` packages (the outermost frame where none is),
    so each kernel can be put down to the function that made it. {} for a text without them."""
    tables: dict[str, dict[int, str]] = {}
    table = None
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = tables.setdefault(line, {})
        elif table is not None and (row := _TABLE_ROW.match(line)):
            table[int(row.group(1))] = row.group(2)
        elif line.strip():
            table = None
    if len(tables) < 4:
        return {}

    def fields(text: str) -> dict[str, int]:
        return {k: int(v) for k, v in _FIELD.findall(text)}

    def label(location: int) -> tuple[str, str]:
        at = fields(tables["FileLocations"][location])
        path = tables["FileNames"][at["file_name_id"]].strip('"').split("/")
        function = tables["FunctionNames"][at["function_name_id"]].strip('"').split(".")[-1]
        return "/".join(path[-2:]), function

    try:
        parents = {
            i: fields(row).get("parent_frame_id", 0) for i, row in tables["StackFrames"].items()
        }
        # jaxlib 0.10 prints each parent one past its id (1: none), so some frames name
        # themselves; a text where none does is read as it is (0: none)
        shift = int(any(parent == i for i, parent in parents.items()))
        frames = {}
        for frame in tables["StackFrames"]:
            chain, current = [], frame
            while current in parents and len(chain) <= len(parents):
                chain.append(label(fields(tables["StackFrames"][current])["file_location_id"]))
                current = parents[current] - shift
            mine = [(f, fn) for f, fn in chain if f.split("/")[0] in own] or chain[-1:]
            frames[frame] = f"{mine[0][0]}:{mine[0][1]}"
    except (KeyError, IndexError):  # tables of another layout: no labels, not a failure
        return {}
    return frames


def loop_kernels(hlo: str, trip_count: int) -> dict[str, Any] | None:
    """The kernels one iteration of a compiled program's main loop launches: the innermost
    `while` loop that XLA knows runs `trip_count` times and that holds a convolution, dot or
    library call (`HEAVY_OPS`) at any depth. For a search, the loop over simulations: not a
    scan over moves nor a random-number loop with the same trip count, which hold no network or
    only the whole search. `hlo` is `jax.jit(f).lower(...).compile().as_text()`; None if no
    loop matches.

    Counted: every instruction of the loop's body and condition but the free ones (`FREE_OPS`);
    a fusion is one kernel whatever it fuses; a `call` counts its callee, a conditional its
    largest branch, a nested loop with a known trip count n its body n times and its condition
    n + 1 times, and one whose trip count depends on the data (a search's walks down and up
    the tree) one iteration of each: those kernels, `data_dependent_loop_kernels`, repeat per
    level of the tree. `by_kind` splits the kernels by `kernel_kind` of their opcode, fused
    opcodes and library call, `by_function` by the azjax (or games) function that made them
    (`stack_frames`); `loops`: how many loops matched (the largest counts)."""
    computations = parse_hlo(hlo)
    loops = {}  # body -> condition
    for instructions in computations.values():
        for opcode, rest in instructions:
            trips = _TRIP_COUNT.search(rest)
            if opcode != "while" or not trips or int(trips.group(1)) != trip_count:
                continue
            callees = _callees(rest)
            body, condition = callees["body"][0], callees["condition"][0]
            if any(
                op in HEAVY_OPS for c in _reachable(computations, body) for op, _ in computations[c]
            ):
                loops[body] = condition
    reaches = {body: _reachable(computations, body) - {body} for body in loops}
    innermost = [b for b in loops if not any(other in reaches[b] for other in loops)]
    if not innermost:
        return None
    frames = stack_frames(hlo)
    counts = []
    for body in innermost:
        kernels, unbounded = _count(computations, loops[body], frames)
        body_kernels, body_unbounded = _count(computations, body, frames)
        counts.append((kernels + body_kernels, unbounded + body_unbounded))
    kernels, unbounded = max(counts, key=lambda c: c[0].total())
    kinds, functions = collections.Counter(), collections.Counter()
    for (kind, where), n in kernels.items():
        kinds[kind] += n
        functions[where] += n
    return {
        "kernels": kernels.total(),
        "data_dependent_loop_kernels": unbounded,
        "by_kind": dict(kinds.most_common()),
        "by_function": dict(functions.most_common()),
        "loops": len(innermost),
    }
