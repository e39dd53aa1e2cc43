"""The Colab TPU notebook: its kernel alone uses JAX, and it runs top to bottom on the CPU with
8 fake devices.

On a TPU VM only one process may open the TPU: once the notebook's kernel has used JAX, a `!`
command that starts JAX (`!azjax-train`, `!python ...`) fails or runs on the CPU. So training
and evaluation run in the kernel, and `order_problems` checks that no such command follows the
kernel's first JAX use.

Colab's own pieces are stood in for: Google Drive is a temporary folder (`drive.mount` is a
stub; JAX's compilation cache is the suite's), `/content/azjax` is this checkout (so the
notebook's own test skips the clone), the `jax[tpu]` install is skipped, and `OVERRIDES` shrink
`connect4_tpu.yaml` to a CPU-sized run of two iterations. The device cell runs first as on a
runtime without a TPU (it must stop), then with `AZJAX_ALLOW_CPU=1`. (Rerunning the training
cell after a disconnect resumes from "Drive": resuming on any number of devices and processes
is checked in tests/test_multihost.py.)

The cells run in one interpreter that starts, like the Colab kernel before `pip install -e`,
unable to import azjax: `python -I -S` (no PYTHONPATH, no current folder, no site-packages
`.pth` files, so no editable-install finder) with only the venv's site-packages folder added
to `sys.path` for the dependencies. The `!` commands start new processes, as in Colab.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig

import numpy as np
from helpers import ROOT

from azjax.checkpoint import list_steps, load_for_inference

NOTEBOOK = ROOT / "scripts" / "colab_tpu.ipynb"
SHRINK = [  # connect4_tpu.yaml (bfloat16, sharded over 8 devices) at a CPU-sized scale
    "network.blocks=0",
    "network.channels=8",
    "search.num_simulations=4",
    "selfplay.batch_size=16",
    "selfplay.chunk_moves=42",  # every game ends: value targets are known
    "selfplay.fast_simulations=2",
    "replay.capacity=2048",
    "replay.min_size=1",
    "train.batch_size=16",
    "train.steps_per_iteration=2",
    "train.iterations=2",
    "eval.final_num_games=0",
]
# The kernel's first use of JAX: an import of JAX or of a package that imports it.
USES_JAX = re.compile(r"^\s*(import|from)\s+(jax|azjax|games)\b")
# What must not follow it: a process that may start JAX, from a shell command (`!`, `%` magics,
# `%%bash` cells) running azjax's commands, Python or its scripts, or from Python code.
SHELL_STARTS_JAX = re.compile(r"azjax-|python|scripts/")
CODE_STARTS_JAX = re.compile(r"\bsubprocess\b|\bos\.(system|popen|exec)")


def order_problems(cells: list[dict]) -> list[str]:
    """The notebook's lines that may start JAX in another process after the kernel used it."""
    problems, used = [], None
    for number, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
        source = "".join(cell["source"])
        shell_cell = source.startswith("%%")
        for line in source.splitlines():
            shell = shell_cell or line.lstrip().startswith(("!", "%"))
            starts = (SHELL_STARTS_JAX if shell else CODE_STARTS_JAX).search(line)
            if used and starts:
                problems.append(f"code cell {number}: {line.strip()!r} after {used!r}")
            if not shell and USES_JAX.match(line):
                used = used or line.strip()
    return problems


def test_notebook_starts_no_jax_process_after_its_kernel_used_jax():
    assert order_problems(json.loads(NOTEBOOK.read_text())["cells"]) == []
    # the check finds one: a training command after the kernel imported JAX
    cells = [{"cell_type": "code", "source": src} for src in ("import jax\n", "!azjax-train")]
    assert order_problems(cells) == ["code cell 1: '!azjax-train' after 'import jax'"]
    assert order_problems(cells[::-1]) == []  # before it, the command's process ends first


# Executes the notebook's code cells in order. `!` lines run in a shell, `%` magics are skipped;
# a cell that stops for want of a TPU is run again with AZJAX_ALLOW_CPU=1.
RUNNER = r"""
import importlib.util, json, os, pathlib, subprocess, sys, types

notebook, root, drive, site_packages, shrink = sys.argv[1:]
sys.path.append(site_packages)  # the dependencies; pip's .pth files are read at start-up only
assert importlib.util.find_spec("azjax") is None, "azjax importable before the notebook ran"
namespace = {"drive": types.SimpleNamespace(mount=lambda path: print("mounted", path))}
for cell in json.load(open(notebook))["cells"]:
    if cell["cell_type"] != "code":
        continue
    source = "".join(cell["source"]).replace("from google.colab import drive", "")
    cache = os.environ.get("AZJAX_JAX_CACHE")  # the suite's: compiled programs kept
    source = source.replace("/content/drive/MyDrive/azjax/jax_cache", cache or f"{drive}/cache")
    source = source.replace("/content/drive/MyDrive", drive).replace("/content/azjax", root)
    source = source.replace("GAMES = 100", "GAMES = 2").replace("OVERRIDES = []", shrink)
    code = []
    for line in source.splitlines() + ["!"]:
        if not line.startswith(("!", "%")):
            code.append(line)
            continue
        try:
            exec("\n".join(code), namespace)
        except RuntimeError as stop:
            assert "AZJAX_ALLOW_CPU" not in os.environ, stop
            print("stopped:", stop, flush=True)
            os.environ["AZJAX_ALLOW_CPU"] = "1"
            exec("\n".join(code), namespace)
        code = []
        command = line[1:].format(**namespace)
        if line.startswith("!") and command and not command.startswith("pip install"):
            print("$", command, flush=True)
            subprocess.run(command, shell=True, check=True)
import games  # the last cell imported it in this interpreter: from the checkout
assert pathlib.Path(games.__file__).is_relative_to(root), games.__file__
"""


def test_colab_notebook_trains_and_evaluates(tmp_path):
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["metadata"]["accelerator"] == "TPU"
    code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert "from google.colab import drive" in code
    assert "GAMES = 100" in code and "OVERRIDES = []" in code
    assert 'pip install -q -e /content/azjax "jax[tpu]' in code  # the one line not run here

    env = {k: v for k, v in os.environ.items() if k != "AZJAX_ALLOW_CPU"}
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    site_packages = sysconfig.get_paths()["purelib"]
    args = [str(NOTEBOOK), str(ROOT), str(tmp_path), site_packages, f"OVERRIDES = {SHRINK!r}"]
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", RUNNER, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "stopped: no TPU in this runtime (JAX sees cpu devices)" in result.stdout, output
    assert "8 cpu device(s)" in result.stdout and "iteration 2, last loss" in result.stdout
    for opponent in ("random", "greedy", "alphabeta:4"):
        assert f"vs {opponent}: +" in result.stdout, output

    workdir = tmp_path / "azjax" / "connect4_tpu"
    assert list_steps(workdir) == [2]  # checkpoint.every=5: the last iteration's
    log = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log] == [1, 2] and all(r["train/trained"] for r in log)
    # Parameters trained on 8 devices load for inference on one.
    config, params = load_for_inference(str(workdir))
    assert config.selfplay.batch_size == 16 and config.network.dtype == "bfloat16"
    kernel = params["params"]["Dense_0"]["kernel"]
    assert kernel.dtype == np.float32 and len(kernel.sharding.device_set) == 1
