"""The docs hold together: every relative link and anchor in README.md, docs/ and the code's
comments resolves, and the Python of README, docs/evaluation.md and docs/models.md runs."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from helpers import ROOT, write_tiny_run

import games
from azjax import agents, export, zoo
from azjax.config import load_config

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_LINK = re.compile(r"(?<![\w/.-])docs/[\w/.-]*\.md(?:#[\w-]+)?")  # docs/x.md#anchor in code
CODE_DIRS = ("azjax", "games", "scripts", "configs")
CODE_SUFFIXES = {".py", ".yaml", ".sh", ".ipynb", ".toml"}


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, punctuation dropped
    (hyphens and underscores kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    result = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    """The relative links (and #anchors) of a markdown file that point at nothing."""
    broken = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where} (no heading #{anchor})")
    return broken


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(path: Path):
    assert broken_links(path) == []


def code_links(path: Path, root: Path = ROOT) -> list[str]:
    """The `docs/PAGE.md[#anchor]` references in a source file (from the repository root) that
    point at nothing."""
    broken = []
    for target in CODE_LINK.findall(path.read_text(encoding="utf-8", errors="replace")):
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(root)}: {target}"
        if not (root / file_part).is_file():
            broken.append(f"{where} (no such file)")
        elif anchor and anchor not in anchors(root / file_part):
            broken.append(f"{where} (no heading #{anchor})")
    return broken


def test_every_link_in_the_code_resolves():
    sources = [ROOT / "pyproject.toml"]
    for folder in CODE_DIRS:
        sources += [p for p in sorted((ROOT / folder).rglob("*")) if p.suffix in CODE_SUFFIXES]
    assert [line for path in sources for line in code_links(path)] == []


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a markdown file, in order."""
    blocks, block = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if block is None and line.strip() == "```python":
            block = []
        elif block is not None and FENCE.match(line):
            blocks.append("\n".join(block))
            block = None
        elif block is not None:
            block.append(line)
    return blocks


def test_the_readme_python_runs(monkeypatch, capsys):
    """README's two snippets run as written, but for the agent: the zoo's small Connect4 net at
    2 simulations in place of zoo:connect4 (the same calls; tests/test_agents.py plays that
    one), so the front page keeps to the library."""
    monkeypatch.delenv(zoo.ENV, raising=False)
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) == 2 and blocks[1].count('"zoo:connect4"') == 1
    names: dict = {}
    exec(compile(blocks[0], "README.md (games)", "exec"), names)
    assert names["batch"].current_player.shape == (1024,)
    assert (names["batch"].current_player == 1).all() and "X" in capsys.readouterr().out
    agent_block = blocks[1].replace('"zoo:connect4"', '"zoo:connect4_cpu:2"')
    exec(compile(agent_block, "README.md (agents)", "exec"), names)
    actions, states = names["actions"], names["states"]
    assert actions.shape == (64,) and actions.dtype == "int32"
    assert states.legal_action_mask[jnp.arange(64), actions].all()


def test_the_evaluation_page_python_runs(tmp_path, monkeypatch):
    """docs/evaluation.md's agent snippet as written but for 2 simulations in place of 64, on a
    tiny Connect4 run at the path it names; and its claim: the function that takes the agent
    compiles once for every checkpoint."""
    (block,) = python_blocks(ROOT / "docs" / "evaluation.md")
    assert block.count('"search:runs/connect4@200:64"') == 1
    write_tiny_run(tmp_path / "runs" / "connect4", steps=(100, 200), game="connect4")
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    block = block.replace("@200:64", "@200:2")
    exec(compile(block, "docs/evaluation.md", "exec"), names)
    game, states, move = names["game"], names["states"], names["move"]
    assert names["actions"].shape == (256,) and states.current_player.shape == (256,)
    older = agents.make("search:runs/connect4@100:2", game)
    move(older, names["state"], jax.random.key(5))  # another checkpoint: no new compile
    assert move._cache_size() == 1


def test_the_model_page_python_runs(tmp_path, monkeypatch):
    """docs/models.md's snippet on a Connect4 model file at the name it uses, given a batch of
    observations: the network's policy logits and value for each."""
    (block,) = python_blocks(ROOT / "docs" / "models.md")
    write_tiny_run(tmp_path / "run", steps=(1,), game="connect4")
    export.export_run(tmp_path / "run", tmp_path / "connect4.azjax")
    monkeypatch.chdir(tmp_path)
    names = {"observations": jnp.zeros((3, *games.make("connect4").observation_shape))}
    tree = ast.parse(block)
    *body, last = tree.body  # the closing expression: what the reader sees
    exec(compile(ast.Module(body, []), "docs/models.md", "exec"), names)
    logits, value = eval(compile(ast.Expression(last.value), "docs/models.md", "eval"), names)
    assert logits.shape == (3, 7) and value.shape == (3,)
    assert (
        names["found"].name == "connect4.azjax"
        and names["found"].card["game"]["name"] == "connect4"
    )


def test_the_new_game_guide_is_whole(tmp_path):
    """docs/adding_a_game.md gives the whole game file (docs/connect3.py, which
    tests/test_new_game.py plays) and a config that loads as it is written."""
    guide = (ROOT / "docs" / "adding_a_game.md").read_text(encoding="utf-8")
    assert python_blocks(ROOT / "docs" / "adding_a_game.md")[0] + "\n" == (
        ROOT / "docs" / "connect3.py"
    ).read_text(encoding="utf-8")
    (config,) = re.findall(r"```yaml\n(.*?)```", guide, re.S)
    (tmp_path / "connect3.yaml").write_text(config)
    loaded = load_config(tmp_path / "connect3.yaml", check=False)
    small = load_config(ROOT / "configs" / "small_game.yaml")
    assert loaded.game.name == "connect3" and loaded.selfplay.temperature_moves is None
    assert dataclasses.replace(loaded, game=small.game) == small


def test_slug_follows_github():
    assert slug("Targets missed, and what they would take") == (
        "targets-missed-and-what-they-would-take"
    )
    assert slug("`dots_and_boxes_cpu`") == "dots_and_boxes_cpu"
    assert slug("Using an agent: `agents.make`") == "using-an-agent-agentsmake"
    assert slug("Links to [docs](docs/x.md) & more") == "links-to-docs--more"


def test_broken_links_are_caught(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#a-section) [second](other.md#a-section-1) [here](#page)\n"
        "[web](https://example.com/nothing) `[code](missing.md)`\n"
        "```\n[fenced](missing.md)\n```\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) ![img](missing.png) [self](#nope)\n"
    )
    assert broken_links(page) == [
        f"{page}: missing.md (no such file)",
        f"{page}: other.md#nowhere (no heading #nowhere)",
        f"{page}: missing.png (no such file)",
        f"{page}: #nope (no heading #nope)",
    ]


def test_code_links_are_caught(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## A section\n")
    source = tmp_path / "code.py"
    source.write_text(
        "# docs/page.md#a-section and docs/page.md are fine; ../docs/x.md is not ours\n"
        "# docs/gone.md, docs/page.md#nowhere\n"
    )
    assert code_links(source, tmp_path) == [
        "code.py: docs/gone.md (no such file)",
        "code.py: docs/page.md#nowhere (no heading #nowhere)",
    ]
