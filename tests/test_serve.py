"""The browser-play JSON API (azjax/web/app.py) through Starlette's TestClient, and `azjax-serve`
(its refusals of bad command lines: tests/test_exit_status.py)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET

import jax
import pytest
from helpers import ROOT, write_tiny_run
from starlette.testclient import TestClient
from test_play import tictactoe_outcome

import games
from azjax import session
from azjax.cli import serve
from azjax.web import app
from azjax.web.app import MAX_BODY, create_app


def move(client, view: dict, action: int):
    """The answer to playing `action` in the game of `view`, at its ply."""
    return client.post(f"/api/games/{view['id']}/move", json={"action": action, "ply": view["ply"]})


def clickable(view: dict) -> list[int]:
    root = ET.fromstring(view["svg"])
    return sorted(int(e.get("data-action")) for e in root.iter() if e.get("data-action"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder with one tiny Tic-Tac-Toe run (two checkpoints) and an empty folder."""
    root = tmp_path_factory.mktemp("runs")
    (root / "empty").mkdir()
    write_tiny_run(root / "group" / "ttt")
    return root


@pytest.fixture(scope="module")
def client(runs):
    with TestClient(create_app(str(runs), analyse=False)) as c:
        yield c


def new_game(client, **body):
    body = {"game": "tictactoe", "opponent": "random", **body}
    response = client.post("/api/games", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def test_page_static_files_and_options(client, runs):
    page = client.get("/")
    assert page.status_code == 200 and '<select id="game">' in page.text
    assert client.get("/static/app.js").status_code == 200
    options = client.get("/api/options").json()
    assert {g["name"] for g in options["games"]} == set(games.names())
    sizes = {g["name"]: g["sizes"] for g in options["games"]}
    assert sizes["othello"]["size"] == {"default": 8, "values": [6, 8]}
    assert sizes["chain_reaction"]["rows"]["values"] == list(range(2, 13))
    assert "random" in options["baselines"] and "mcts:100" in options["baselines"]
    assert options["runs"] == [
        {"path": str(runs / "group" / "ttt"), "game": "tictactoe", "kwargs": {}, "steps": [1, 2]}
    ]


def test_whole_games_as_either_player(client):
    view = new_game(client, human=0, seed=7)
    assert view["ply"] == 0 and view["to_move"] == 0 and clickable(view) == list(range(9))
    while not view["over"]:
        action = clickable(view)[-1]
        response = move(client, view, action)
        assert response.status_code == 200, response.text
        previous, view = view, response.json()
        new = view["new"]
        assert new[0] == {**new[0], "by": "human", "notation": str(action + 1), "player": 0}
        assert [p["by"] for p in new[1:]] == ["agent"] * (len(new) - 1) and len(new) <= 2
        assert view["ply"] == previous["ply"] + len(new)
        assert all(len(p["frames"]) == 1 and p["frames"][0].startswith("<svg") for p in new)
    winner = tictactoe_outcome([m["notation"] for m in view["moves"]])
    assert view["result"] == {"X": "win", "O": "loss", "draw": "draw"}[winner]
    assert clickable(view) == [] and view["to_move"] is None and view["legal"] == []
    shown = client.get(f"/api/games/{view['id']}").json()
    assert shown["moves"] == view["moves"] and shown["new"] == []

    view = new_game(client, human=1, seed=3)  # the agent opens, animated
    assert view["analyst"] == "pure MCTS with 200 simulations"  # hints against a baseline
    assert [(p["by"], len(p["frames"])) for p in view["new"]] == [("agent", 1)]
    opening = int(view["moves"][0]["notation"]) - 1
    assert view["to_move"] == 1 and clickable(view) == [a for a in range(9) if a != opening]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ("null", "expected a JSON object"),
        ('{"opponent": "random"}', "missing field 'game'"),
        ('{"game": "tictactoe", "opponent": "random", "colour": 1}', "unknown field"),
        ('{"game": "tictactoe", "opponent": "random", "human": "first"}', "must be int"),
        ('{"game": "tictactoe", "opponent": "random", "human": true}', "must be int"),
        ('{"game": "tictactoe", "opponent": "random", "human": 2}', "human must be 0"),
        ('{"game": "chess", "opponent": "random"}', "unknown game 'chess'"),
        ('{"game": "othello", "kwargs": {"size": 7}, "opponent": "random"}', "size must be"),
        ('{"game": "othello", "kwargs": {"rows": 7}, "opponent": "random"}', "unknown size"),
        ('{"game": "othello", "kwargs": [8], "opponent": "random"}', "must be dict"),
        ('{"game": "dots_and_boxes", "kwargs": {"rows": true}, "opponent": "x"}', "got True"),
        ('{"game": "tictactoe", "opponent": "mcts:99999"}', "unknown opponent"),
        ('{"game": "tictactoe", "opponent": "policy:/etc"}', "unknown opponent"),
        ('{"game": "tictactoe", "opponent": "random", "seed": -1}', "0 <= seed < 2**63, got -1"),
        ('{"game": "tictactoe", "opponent": "random", "seed": 18446744073709551616}', "2**63"),
        ("[" * 2000 + "]" * 2000, "nested too deeply"),
        ('{"":' * 810 + "1" + "}" * 810, "nested too deeply"),
        # four levels of [] and {} are read (and this size refused), five are not
        ('{"game": "othello", "kwargs": {"size": [[8]]}, "opponent": "random"}', "got [[8]]"),
        ('{"game": "othello", "kwargs": {"size": [[[8]]]}, "opponent": "random"}', "deeply"),
    ],
)
def test_new_game_refuses_bad_requests(client, body, message):
    response = client.post("/api/games", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and message in response.json()["error"]


def test_oversized_bodies_unknown_ids_and_routes(client):
    big = json.dumps({"game": "tictactoe", "opponent": "random", "pad": "x" * MAX_BODY})
    chunks = (b" " * MAX_BODY for _ in range(4))  # no Content-Length: the limit holds while read
    for content in (big, chunks):
        response = client.post("/api/games", content=content)
        assert response.status_code == 413 and "too large" in response.json()["error"]
    small = json.dumps({"game": "tictactoe", "opponent": "random"})
    for declared, status, said in (  # refused before reading, whatever follows
        (str(MAX_BODY + 1), 413, "too large"),
        ("-1", 400, "Content-Length must be a count of bytes, got '-1'"),
        ("many", 400, "got 'many'"),
    ):
        headers = {"content-type": "application/json", "content-length": declared}
        response = client.post("/api/games", content=small, headers=headers)
        assert response.status_code == status and said in response.json()["error"]
    for path in ("", "/move", "/undo", "/hint"):
        response = client.post(f"/api/games/feedbeef{path}", json={"ply": 0})
        if not path:
            response = client.get("/api/games/feedbeef")
        assert response.status_code == 404
        assert "unknown or expired game id 'feedbeef'" in response.json()["error"]
    assert client.get("/api/nothing").status_code == 404
    wrong = client.delete("/api/games")
    assert wrong.status_code == 405 and "error" in wrong.json()


def test_bad_moves_stale_requests_and_finished_games(client):
    view = new_game(client, human=0, seed=1)
    url = f"/api/games/{view['id']}"
    assert client.post(f"{url}/move", json={"action": 4}).status_code == 400  # no ply
    bad = client.post(f"{url}/move", json={"action": "5", "ply": 0})
    assert bad.status_code == 400 and "'action' must be int" in bad.json()["error"]
    error = client.post(f"{url}/move", json={"action": 9, "ply": 0}).json()["error"]
    assert error.startswith("action 9 is not legal here; legal actions"), error
    assert re.findall(r"(\d+) \((\d+)\)", error) == [(str(a), str(a + 1)) for a in range(9)]
    assert client.post(f"{url}/undo", json={"ply": 0}).status_code == 409  # nothing to undo
    view = client.post(f"{url}/move", json={"action": 4, "ply": 0}).json()
    taken = client.post(f"{url}/move", json={"action": 4, "ply": view["ply"]})
    assert taken.status_code == 400 and "action 4 is not legal here" in taken.json()["error"]
    stale = client.post(f"{url}/move", json={"action": 0, "ply": 0})
    assert stale.status_code == 409 and "stale" in stale.json()["error"]
    assert client.post(f"{url}/hint", json={"ply": 0}).status_code == 409
    undone = client.post(f"{url}/undo", json={"ply": view["ply"]}).json()
    assert undone["ply"] == 0 and undone["moves"] == [] and clickable(undone) == list(range(9))
    view = undone
    while not view["over"]:
        view = move(client, view, clickable(view)[0]).json()
    over = client.post(f"{url}/move", json={"action": 0, "ply": view["ply"]})
    assert over.status_code == 409 and "over" in over.json()["error"]
    assert client.post(f"{url}/hint", json={"ply": view["ply"]}).status_code == 409


def test_games_are_independent_and_the_least_recently_used_expire(client):
    views = [new_game(client, human=0, seed=s) for s in range(4)]

    def first_move(i: int) -> dict:
        return client.post(f"/api/games/{views[i]['id']}/move", json={"action": i, "ply": 0}).json()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        after = list(pool.map(first_move, range(4)))
    for i, view in enumerate(after):
        assert view["moves"][0] == {"player": 0, "notation": str(i + 1), "by": "human"}
        assert view["ply"] == 2
    with TestClient(create_app(None, analyse=False, max_games=2)) as c:
        first, second, third = (new_game(c, seed=s) for s in range(3))
        assert c.get(f"/api/games/{first['id']}").status_code == 404
        assert c.get(f"/api/games/{second['id']}").status_code == 200  # now the newer of two
        fourth = new_game(c, seed=4)
        assert c.get(f"/api/games/{third['id']}").status_code == 404
        assert {c.get(f"/api/games/{v['id']}").status_code for v in (second, fourth)} == {200}


def test_checkpoint_opponents_and_their_analysis(runs):
    path = runs / "group" / "ttt"
    with TestClient(create_app(str(runs), analyse=True)) as c:
        for kind, own in (("policy", False), ("search", True)):
            ttt, spec = games.make("tictactoe"), f"{kind}:{path}@2"
            if not own:  # another search's analysis compiles beside the agent, in a thread
                session.prepare(ttt, spec, analyse=True)
                for thread in list(session._THREADS.values()):
                    thread.join()  # then shows from the first move on
            # a searching agent's analysis is its own search: the first move has it at once
            view = new_game(c, human=1, opponent=spec, seed=4)
            first = view["analysis"]
            assert view["analyst"] == first["source"] == f"the network of {path}@2 with search"
            assert first["own"] is own and first["played"] == view["moves"][0]["notation"]
            assert -1.0 <= first["value"] <= 1.0
            assert {m["move"] for m in first["moves"]} <= {str(c) for c in range(1, 10)}
            assert sum(m["share"] for m in first["moves"]) <= 1.0 + 1e-6
            url = f"/api/games/{view['id']}"
            hint = c.post(f"{url}/hint", json={"ply": 1}).json()
            assert hint["source"] == view["analyst"] and -1 <= hint["value"] <= 1
            assert {m["move"] for m in hint["moves"]} <= set(view["legal"])
            moved = c.post(f"{url}/move", json={"action": clickable(view)[0], "ply": 1}).json()
            assert moved["analysis"]["played"] == moved["moves"][-1]["notation"]
            undone = c.post(f"{url}/undo", json={"ply": moved["ply"]}).json()
            assert undone["ply"] == 1 and undone["analysis"] == first  # shown again
            assert c.get(url).json()["analysis"] == first
        older = c.post("/api/games", json={"game": "tictactoe", "opponent": f"policy:{path}@1"})
        assert older.status_code == 400  # only the newest checkpoint is offered
        other = c.post("/api/games", json={"game": "connect4", "opponent": f"search:{path}@2"})
        assert other.status_code == 400 and "unknown opponent" in other.json()["error"]


def test_chain_reaction_explosions_come_level_by_level(client):
    game = games.make("chain_reaction", rows=3, cols=3)
    view = new_game(client, game="chain_reaction", kwargs={"rows": 3, "cols": 3}, seed=0)
    exploded = False
    for _ in range(12):
        if view["over"]:
            break
        mine = [a for a in clickable(view) if a in (0, 2, 6, 8)] or clickable(view)  # corners
        before = view["moves"]
        view = move(client, view, mine[0]).json()
        state = game.init(jax.random.key(0))
        for m in [*before, *view["new"]]:
            action = game.parse_action(m["notation"], state)
            if "frames" in m:
                levels = game.chain_levels(state, action)
                assert len(m["frames"]) == len(levels)
                assert all("data-action" not in f for f in m["frames"])
                exploded |= len(levels) > 1
            state = game.checked_step(state, action)
    assert exploded


def test_command_line_server_answers_at_the_printed_address(runs):
    # --port 0: any free port, and the address printed is the one served; the zoo's games are
    # offered (Backgammon's model needs the pgx extra, a test dependency).
    command = [sys.executable, "-m", "azjax.cli.serve", "--runs", str(runs), "--port", "0"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        line = server.stdout.readline().decode()
        url = re.fullmatch(r"azjax: open (http://127\.0\.0\.1:(\d+))\n", line)
        assert url and int(url.group(2)) > 0, line + server.stdout.read().decode()
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url.group(1)}/api/options") as response:
                    options = json.load(response)
                break
            except OSError:
                assert server.poll() is None, server.stdout.read().decode()
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.2)
        assert options["runs"][0]["game"] == "tictactoe"
        assert "pgx:backgammon" in [g["name"] for g in options["games"]]  # the zoo's, unasked
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_command_line_server_names_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as stop:
            serve.main(["--port", str(port)])
    assert (
        stop.value.code == f"azjax-serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def damage(run: pathlib.Path, step: int, part: str) -> None:
    """Overwrite the array data (`params`) or the JSON (`meta`) of one checkpoint."""
    for path in (run / "checkpoints" / str(step) / part).rglob("*"):
        if path.is_file() and (part == "meta" or path.parent.name == "d"):
            path.write_bytes(b"\0" * max(path.stat().st_size, 8))


def test_damaged_checkpoints_are_not_offered(tmp_path):
    """A damaged newest checkpoint falls back to the newest good one; a run with none good is
    left out; one damaged after it was listed is refused, named, and read again (keyed by its
    folder's modification time) at the next listing."""
    meta, params, bad = tmp_path / "meta", tmp_path / "params", tmp_path / "bad"
    for run in (meta, params, bad):
        write_tiny_run(run, steps=(1, 2, 3))
    damage(meta, 3, "meta")
    damage(params, 3, "params")
    damage(bad, 1, "meta")
    for step in (2, 3):
        damage(bad, step, "params")
    with TestClient(create_app(str(tmp_path), analyse=False)) as c:
        listed = c.get("/api/options").json()["runs"]
        assert [(r["path"], r["steps"]) for r in listed] == [
            (str(meta), [1, 2]),
            (str(params), [1, 2]),
        ]
        assert new_game(c, human=1, opponent=f"search:{params}@2")["moves"][0]["by"] == "agent"
        newest = c.post("/api/games", json={"game": "tictactoe", "opponent": f"search:{meta}@3"})
        assert newest.status_code == 400 and "unknown opponent" in newest.json()["error"]
        damage(meta, 2, "params")  # since it was listed
        refused = c.post("/api/games", json={"game": "tictactoe", "opponent": f"search:{meta}@2"})
        assert refused.status_code == 400 and str(meta) in refused.json()["error"], refused.text
        damage(meta, 2, "meta")
        folder = meta / "checkpoints" / "2"
        later = folder.stat().st_mtime_ns + 10**9
        os.utime(folder, ns=(later, later))
        assert app.find_runs(str(tmp_path))[0]["steps"] == [1]


def test_opponents_are_offered_for_their_own_board_size_only():
    runs = [
        {"path": "runs/o8", "game": "othello", "kwargs": {"size": 8}, "steps": [5, 10]},
        {"path": "runs/o6", "game": "othello", "kwargs": {"size": 6}, "steps": [7]},
    ]
    eight = app.opponents(runs, "othello", {"size": 8})
    assert {"zoo:othello", "search:runs/o8@10", "policy:runs/o8@10"} <= set(eight)
    assert not any("othello6" in spec or "o6" in spec for spec in eight), eight
    six = app.opponents(runs, "othello", {"size": 6})
    assert {"zoo:othello6", "policy-zoo:othello6", "search:runs/o6@7"} <= set(six)
    assert "zoo:othello" not in six and not any("o8" in spec for spec in six), six


def test_opponents_are_compiled_ahead_and_said_to_be_ready(monkeypatch):
    monkeypatch.setattr(session, "_PREPARED", set())
    with TestClient(create_app(None, analyse=False)) as c:
        view = new_game(c, human=0, opponent="greedy", seed=0)
        assert view["ready"] is False  # its first move here will compile it
        body = {"game": "tictactoe", "opponent": "greedy"}
        assert c.post("/api/warm", json=body).status_code == 202
        deadline = time.monotonic() + 120
        while c.post("/api/warm", json=body).status_code != 200:
            assert time.monotonic() < deadline, "never compiled"
            time.sleep(0.2)
        assert c.get(f"/api/games/{view['id']}").json()["ready"] is True
        bad = c.post("/api/warm", json={**body, "opponent": "mcts:99999"})
        assert bad.status_code == 400 and "unknown opponent" in bad.json()["error"]
    started = []  # at start-up: the page's first game's first opponent only
    monkeypatch.setattr(app, "warm_in_background", lambda pairs, analyse: started.extend(pairs))
    create_app(None, warm_up=True)
    deadline = time.monotonic() + 60
    while not started:
        assert time.monotonic() < deadline, "nothing compiled at start-up"
        time.sleep(0.05)
    first = games.make(games.names()[0])
    assert started == [(first, session.default_opponent(first))]


def test_a_trained_run_is_the_first_choice_of_a_game_without_zoo_model():
    size = {"rows": 3, "cols": 3}  # no zoo model plays Chain Reaction 3x3
    runs = [{"path": "runs/c", "game": "chain_reaction", "kwargs": size, "steps": [2, 5]}]
    assert app.first_choice(runs, "chain_reaction", size) == "search:runs/c@5"
    assert app.first_choice([], "chain_reaction", size) == session.FALLBACK_OPPONENT
    assert session.FALLBACK_OPPONENT in app.BASELINES  # offered, so the page can choose it
    assert app.first_choice(runs, "tictactoe", {}) == "zoo:tictactoe"
