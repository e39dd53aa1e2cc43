"""The Colab TPU notebook, run top to bottom on the CPU with 8 fake devices.

Colab's own pieces are stood in for: Google Drive is a temporary folder (`drive.mount` is a
stub), `/content/azjax` is this checkout (so the notebook's own test skips the clone), the
`jax[tpu]` install is skipped, and the training command gets overrides that shrink
`connect4_tpu.yaml` to a CPU-sized run of two iterations. (Rerunning the cell after a
disconnect resumes from "Drive": resuming on any number of devices and processes is checked in
tests/test_multihost.py.)

The cells run in one interpreter that starts, like the Colab kernel before `pip install -e`,
unable to import azjax: `python -I -S` (no PYTHONPATH, no current folder, no site-packages
`.pth` files, so no editable-install finder) with only the venv's site-packages folder added
to `sys.path` for the dependencies. The `!` commands start new processes, as in Colab.
"""

from __future__ import annotations

import json
import sysconfig

import numpy as np
from helpers import ROOT
from test_multidevice import run

from azjax.checkpoint import list_steps, load_for_inference

NOTEBOOK = ROOT / "scripts" / "colab_tpu.ipynb"
SHRINK = [  # connect4_tpu.yaml (bfloat16, sharded over 8 devices) at a CPU-sized scale
    "--quiet",
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
    "eval.final_num_games=0",
]

# Executes the notebook's code cells in order. `!` lines run in a shell, `%` magics are skipped.
RUNNER = r"""
import json, shlex, subprocess, sys, types

import importlib.util, pathlib

notebook, root, drive, site_packages, *shrink = sys.argv[1:]
sys.path.append(site_packages)  # the dependencies; pip's .pth files are read at start-up only
assert importlib.util.find_spec("azjax") is None, "azjax importable before the notebook ran"
drive_module = types.SimpleNamespace(mount=lambda path: print("mounted", path))
namespace, trainings = {"drive": drive_module}, 0
for cell in json.load(open(notebook))["cells"]:
    if cell["cell_type"] != "code":
        continue
    source = "".join(cell["source"]).replace("from google.colab import drive", "")
    source = source.replace("/content/drive/MyDrive", drive)
    source = source.replace("/content/azjax", root).replace("GAMES = 100", "GAMES = 2")
    code = []
    for line in source.splitlines() + ["!"]:
        if not line.startswith(("!", "%")):
            code.append(line)
            continue
        exec("\n".join(code), namespace)
        code = []
        command = line[1:].format(**namespace)
        if line.startswith("%") or not command or command.startswith("pip install"):
            continue
        if " azjax-train " in command:
            trainings += 1
            train = shlex.quote(sys.executable) + " -m azjax.cli.train "
            command = command.replace(" azjax-train ", f" {train}", 1)
            command = f"{command} {' '.join(shrink)} train.iterations=2"
        print("$", command, flush=True)
        subprocess.run(command, shell=True, check=True)
import games  # the last cell imported it in this interpreter: from the checkout
assert pathlib.Path(games.__file__).is_relative_to(root), games.__file__
print("trainings", trainings)
"""


def test_colab_notebook_trains_and_evaluates(tmp_path):
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["metadata"]["accelerator"] == "TPU"
    code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert "from google.colab import drive" in code
    assert "GAMES = 100" in code and "configs/connect4_tpu.yaml" in code
    assert 'pip install -q -e /content/azjax "jax[tpu]' in code  # the one line not run here

    site_packages = sysconfig.get_paths()["purelib"]
    args = ["-I", "-S", "-c", RUNNER, str(NOTEBOOK), str(ROOT), str(tmp_path), site_packages]
    result = run([*args, *SHRINK], devices=8)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "trainings 1" in result.stdout, output
    assert "on 8 cpu device(s)" in result.stdout, output
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
