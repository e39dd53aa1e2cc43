"""The browser-play JSON API (azjax/web/app.py) through Starlette's TestClient."""

from __future__ import annotations

import collections
import concurrent.futures
import gc
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
import jax.numpy as jnp
import pytest
from helpers import ROOT, write_tiny_run
from starlette.testclient import TestClient

import games
from azjax import agents, session
from azjax.web.app import MAX_BODY, create_app

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def outcome(moves: list[str]) -> str | None:
    """Plain Tic-Tac-Toe rules over cells 1-9: "X", "O", "draw" or None (not over)."""
    board = [""] * 9
    for i, move in enumerate(moves):
        assert board[int(move) - 1] == "", f"move {i + 1} on an occupied cell"
        board[int(move) - 1] = "XO"[i % 2]
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return "draw" if all(board) else None


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
    othello = next(g for g in options["games"] if g["name"] == "othello")
    assert othello["sizes"]["size"]["values"] == [6, 8]
    chain = next(g for g in options["games"] if g["name"] == "chain_reaction")
    assert (
        chain["sizes"]["rows"]["values"] == chain["sizes"]["cols"]["values"] == list(range(2, 13))
    )
    assert "random" in options["baselines"] and "mcts:100" in options["baselines"]
    assert options["runs"] == [
        {"path": str(runs / "group" / "ttt"), "game": "tictactoe", "kwargs": {}, "steps": [1, 2]}
    ]


def test_a_full_game_to_the_end(client):
    view = new_game(client, human=0, seed=7)
    assert view["ply"] == 0 and view["to_move"] == 0 and clickable(view) == list(range(9))
    while not view["over"]:
        action = clickable(view)[-1]
        response = client.post(
            f"/api/games/{view['id']}/move", json={"action": action, "ply": view["ply"]}
        )
        assert response.status_code == 200, response.text
        previous, view = view, response.json()
        new = view["new"]
        assert new[0] == {**new[0], "by": "human", "notation": str(action + 1), "player": 0}
        assert all(p["by"] == "agent" and p["player"] == 1 for p in new[1:])
        assert len(new) == 2 or (view["over"] and len(new) == 1)  # strict alternation here
        assert view["ply"] == previous["ply"] + len(new)
        for ply in new:  # every ply comes with a picture of its result
            assert len(ply["frames"]) == 1 and ply["frames"][0].startswith("<svg")
    moves = [m["notation"] for m in view["moves"]]
    winner = outcome(moves)
    assert winner is not None
    assert view["result"] == {"X": "win", "O": "loss", "draw": "draw"}[winner]
    assert clickable(view) == [] and view["to_move"] is None and view["legal"] == []
    shown = client.get(f"/api/games/{view['id']}").json()
    assert shown["moves"] == view["moves"] and shown["new"] == []


def test_second_player_sees_the_agent_opening(client):
    view = new_game(client, human=1, seed=3)
    assert view["analyst"] == "pure MCTS with 200 simulations"  # hints for a baseline opponent
    assert [m["by"] for m in view["moves"]] == ["agent"] and view["to_move"] == 1
    assert [(p["by"], len(p["frames"])) for p in view["new"]] == [("agent", 1)]  # to animate
    opening = int(view["moves"][0]["notation"]) - 1
    assert clickable(view) == [a for a in range(9) if a != opening]


def post(client, path, body):
    return client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ("{not json", 400, "not JSON"),
        ("[1, 2]", 400, "expected a JSON object"),
        ('{"opponent": "random"}', 400, "missing field 'game'"),
        ('{"game": "tictactoe", "opponent": "random", "colour": 1}', 400, "unknown field"),
        ('{"game": "tictactoe", "opponent": "random", "human": "first"}', 400, "must be int"),
        ('{"game": "tictactoe", "opponent": "random", "human": true}', 400, "must be int"),
        ('{"game": "tictactoe", "opponent": "random", "human": 2}', 400, "human must be 0"),
        ('{"game": "chess", "opponent": "random"}', 400, "unknown game 'chess'"),
        ('{"game": "othello", "kwargs": {"size": 7}, "opponent": "random"}', 400, "size must be"),
        ('{"game": "othello", "kwargs": {"rows": 7}, "opponent": "random"}', 400, "unknown size"),
        ('{"game": "othello", "kwargs": [8], "opponent": "random"}', 400, "must be dict"),
        ('{"game": "dots_and_boxes", "kwargs": {"rows": true}, "opponent": "x"}', 400, "got True"),
        ('{"game": "tictactoe", "opponent": "mcts:99999"}', 400, "unknown opponent"),
        ('{"game": "tictactoe", "opponent": "policy:/etc"}', 400, "unknown opponent"),
        ("null", 400, "expected a JSON object"),
        ("[" * 2000 + "]" * 2000, 400, "nested too deeply"),
        ('{"":' * 810 + "1" + "}" * 810, 400, "nested too deeply"),
        # four levels of [] and {} are read (and this size refused), five are not
        ('{"game": "othello", "kwargs": {"size": [[8]]}, "opponent": "random"}', 400, "got [[8]]"),
        ('{"game": "othello", "kwargs": {"size": [[[8]]]}, "opponent": "random"}', 400, "deeply"),
    ],
)
def test_new_game_refuses_bad_requests(client, body, status, message):
    response = client.post("/api/games", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert message in response.json()["error"]


def test_oversized_bodies_are_refused(client):
    big = json.dumps({"game": "tictactoe", "opponent": "random", "pad": "x" * MAX_BODY})
    response = client.post("/api/games", content=big)
    assert response.status_code == 413 and "too large" in response.json()["error"]

    def chunks():  # no Content-Length: the limit holds while reading
        for _ in range(4):
            yield b" " * MAX_BODY

    response = client.post("/api/games", content=chunks())
    assert response.status_code == 413 and "too large" in response.json()["error"]

    # A declared length over the limit is refused before reading, whatever follows it; one
    # that is no count of bytes is named.
    small = json.dumps({"game": "tictactoe", "opponent": "random"})
    for declared, status, said in (
        (str(MAX_BODY + 1), 413, "too large"),
        ("-1", 400, "Content-Length must be a count of bytes, got '-1'"),
        ("many", 400, "got 'many'"),
    ):
        headers = {"content-type": "application/json", "content-length": declared}
        response = client.post("/api/games", content=small, headers=headers)
        assert response.status_code == status and said in response.json()["error"]


def test_unknown_ids_routes_and_methods(client):
    for method, path in [
        ("get", "/api/games/feedbeef"),
        ("post", "/api/games/feedbeef/move"),
        ("post", "/api/games/feedbeef/undo"),
        ("post", "/api/games/feedbeef/hint"),
    ]:
        response = getattr(client, method)(
            path, **({"json": {"ply": 0}} if method == "post" else {})
        )
        assert response.status_code == 404
        assert "unknown or expired game id 'feedbeef'" in response.json()["error"]
    missing = client.get("/api/nothing")
    assert missing.status_code == 404 and "error" in missing.json()
    wrong = client.delete("/api/games")
    assert wrong.status_code == 405 and "error" in wrong.json()


def test_bad_moves_stale_requests_and_finished_games(client):
    view = new_game(client, human=0, seed=1)
    gid = view["id"]
    url = f"/api/games/{gid}/move"
    assert post(client, url, {"action": 4}).status_code == 400  # no ply
    bad = post(client, url, {"action": "5", "ply": 0})
    assert bad.status_code == 400 and "'action' must be int" in bad.json()["error"]
    off = post(client, url, {"action": 99, "ply": 0})
    assert off.status_code == 400 and "action 99 is not legal here" in off.json()["error"]
    assert post(client, f"/api/games/{gid}/undo", {"ply": 0}).status_code == 409
    view = post(client, url, {"action": 4, "ply": 0}).json()
    taken = post(client, url, {"action": 4, "ply": view["ply"]})
    assert taken.status_code == 400 and "action 4 is not legal here" in taken.json()["error"]
    stale = post(client, url, {"action": 0, "ply": 0})
    assert stale.status_code == 409 and "stale" in stale.json()["error"]
    assert post(client, f"/api/games/{gid}/hint", {"ply": 0}).status_code == 409
    undone = post(client, f"/api/games/{gid}/undo", {"ply": view["ply"]}).json()
    assert undone["ply"] == 0 and undone["moves"] == [] and clickable(undone) == list(range(9))
    view = undone
    while not view["over"]:
        view = post(client, url, {"action": clickable(view)[0], "ply": view["ply"]}).json()
    over = post(client, url, {"action": 0, "ply": view["ply"]})
    assert over.status_code == 409 and "over" in over.json()["error"]
    assert post(client, f"/api/games/{gid}/hint", {"ply": view["ply"]}).status_code == 409


def test_games_are_independent_under_concurrent_requests(client):
    views = [new_game(client, human=0, seed=s) for s in range(4)]

    def first_move(i: int) -> dict:
        view = views[i]
        body = {"action": i, "ply": 0}
        return client.post(f"/api/games/{view['id']}/move", json=body).json()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        after = list(pool.map(first_move, range(4)))
    for i, view in enumerate(after):
        assert view["moves"][0] == {"player": 0, "notation": str(i + 1), "by": "human"}
        assert view["ply"] == 2
    untouched = new_game(client, human=0, seed=9)
    assert client.get(f"/api/games/{untouched['id']}").json()["ply"] == 0


def test_least_recently_used_games_expire():
    with TestClient(create_app(None, analyse=False, max_games=2)) as c:
        first, second, third = (new_game(c, seed=s) for s in range(3))
        assert c.get(f"/api/games/{first['id']}").status_code == 404
        assert c.get(f"/api/games/{second['id']}").status_code == 200  # now the newer of two
        fourth = new_game(c, seed=4)
        assert c.get(f"/api/games/{third['id']}").status_code == 404
        assert c.get(f"/api/games/{second['id']}").status_code == 200
        assert c.get(f"/api/games/{fourth['id']}").status_code == 200


def test_the_agent_is_compiled_once_per_game_and_spec(monkeypatch, runs):
    traces = []
    wrapped = {}
    real_make = agents.make

    def counting_make(spec, game):
        agent = real_make(spec, game)
        if agent.fn not in wrapped:

            def fn(params, state, key, inner=agent.fn):
                traces.append(spec)  # runs only while jax traces the function
                return inner(params, state, key)

            wrapped[agent.fn] = fn
        return agent.replace(fn=wrapped[agent.fn])

    monkeypatch.setattr(agents, "make", counting_make)
    monkeypatch.setattr(session, "_AGENTS", collections.OrderedDict())
    with TestClient(create_app(None, analyse=False)) as c:
        for seed in range(3):
            view = new_game(c, human=1, seed=seed)
            c.post(f"/api/games/{view['id']}/move", json={"action": clickable(view)[0], "ply": 1})
    assert traces == ["random"]
    # Two checkpoints of one run: other parameters, the same compiled function.
    game = games.make("tictactoe")
    path = runs / "group" / "ttt"
    for step in (1, 2):
        session.Session(game, f"policy:{path}@{step}", 1, seed=0).reply()
    assert traces == ["random", f"policy:{path}@1"]


def test_checkpoint_opponents_and_analysis(runs):
    path = str(runs / "group" / "ttt")
    with TestClient(create_app(str(runs), analyse=True)) as c:
        view = new_game(c, human=1, opponent=f"policy:{path}@2", seed=2)
        assert view["moves"][0]["by"] == "agent"
        analysis = view["analysis"]
        assert view["analyst"] == analysis["source"] == f"the network of {path}@2 with search"
        assert -1.0 <= analysis["value"] <= 1.0
        assert {m["move"] for m in analysis["moves"]} <= {str(c) for c in range(1, 10)}
        assert sum(m["share"] for m in analysis["moves"]) <= 1.0 + 1e-6
        hint = c.post(f"/api/games/{view['id']}/hint", json={"ply": 1}).json()
        assert hint["source"] == view["analyst"]
        legal = set(view["legal"])
        assert {m["move"] for m in hint["moves"]} <= legal and -1 <= hint["value"] <= 1
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
        view = post(
            client, f"/api/games/{view['id']}/move", {"action": mine[0], "ply": view["ply"]}
        ).json()
        state = game.init(jax.random.key(0))
        for m in before:
            state = game.checked_step(state, game.parse_action(m["notation"], state))
        for ply in view["new"]:
            levels = game.chain_levels(state, game.parse_action(ply["notation"], state))
            assert len(ply["frames"]) == len(levels)
            exploded |= len(levels) > 1
            assert all("data-action" not in f for f in ply["frames"])
            state = game.checked_step(state, game.parse_action(ply["notation"], state))
    assert exploded


def test_moves_without_a_place_on_the_board_become_buttons():
    from azjax.web.app import BrowserGame, view

    game = games.make("othello", size=6)
    game_session = session.Session(game, "random", 0, seed=0)
    opening = view("g", BrowserGame(game_session, {"size": 6}), 0, analyse=False)
    assert opening["buttons"] == []  # every legal move has its square
    assert clickable(opening) == game.legal_actions(game_session.state)
    only_pass = jnp.zeros(game.num_actions, bool).at[game.num_actions - 1].set(True)
    game_session.states[-1] = game_session.state.replace(legal_action_mask=only_pass)
    shown = view("g", BrowserGame(game_session, {"size": 6}), 0, analyse=False)
    assert shown["buttons"] == [{"action": game.num_actions - 1, "label": "pass"}]
    assert clickable(shown) == [] and shown["legal"] == ["pass"]


def test_command_line_server_answers_at_the_printed_address(runs):
    # --port 0: any free port, and the address printed is the one served.
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
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("port", ["99999", "-1", "65536", "http"])
def test_command_line_server_refuses_bad_ports(port):
    command = [sys.executable, "-m", "azjax.cli.serve", "--runs", "none", "--port", port]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "open http" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "--port" in last and "1 to 65535" in last and port in last


def test_command_line_server_refuses_a_runs_folder_that_is_not_there(tmp_path):
    missing = tmp_path / "nonexistent"
    command = [sys.executable, "-m", "azjax.cli.serve", "--runs", str(missing), "--port", "0"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "open http" not in proc.stdout
    assert proc.stderr == f"azjax-serve: --runs {missing}: no such folder\n"


def test_command_line_server_names_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        command = [sys.executable, "-m", "azjax.cli.serve", "--runs", "tests", "--port", port]
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip()
        == f"azjax-serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


@pytest.mark.parametrize("seed", [2**63, 2**64, -1])
def test_new_game_refuses_seeds_out_of_range(runs, seed):
    with TestClient(create_app(str(runs), analyse=False), raise_server_exceptions=False) as c:
        body = {"game": "tictactoe", "opponent": "random", "seed": seed}
        response = c.post("/api/games", json=body)
    assert response.status_code == 400
    assert "0 <= seed < 2**63" in response.json()["error"] and str(seed) in response.json()["error"]


def rss_mb() -> float:
    """This process's resident memory in MB (Linux)."""
    status = pathlib.Path("/proc/self/status")
    if not status.exists():
        pytest.skip("no /proc/self/status: resident memory is read on Linux only")
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def test_memory_stays_flat_under_load():
    """300 new games and 1,000 moves against random (Tic-Tac-Toe, Chain Reaction 3x3, Othello
    6x6 in turn), after a warm-up that compiles everything and fills the game store."""
    kinds = [
        ("tictactoe", {}),
        ("chain_reaction", {"rows": 3, "cols": 3}),
        ("othello", {"size": 6}),
    ]

    def load(client: TestClient, n_games: int, n_moves: int, seed: int) -> int:
        moves = 0
        for i in range(n_games):
            name, kwargs = kinds[i % len(kinds)]
            view = new_game(client, game=name, kwargs=kwargs, seed=seed + i)
            while not view["over"] and moves < n_moves * (i + 1) // n_games:
                action = (clickable(view) or [b["action"] for b in view["buttons"]])[0]
                body = {"action": action, "ply": view["ply"]}
                response = client.post(f"/api/games/{view['id']}/move", json=body)
                assert response.status_code == 200, response.text
                view, moves = response.json(), moves + 1
        return moves

    with TestClient(create_app(None, analyse=False, max_games=32)) as client:
        load(client, 45, 150, seed=10**6)
        gc.collect()
        before = rss_mb()
        assert load(client, 300, 1000, seed=0) >= 900  # a few games end before their share
        gc.collect()
        growth = rss_mb() - before
    assert growth < 50, f"resident memory grew by {growth:.0f} MB"


def damage(run: pathlib.Path, step: int, part: str) -> None:
    """Overwrite the array data (`params`) or the JSON (`meta`) of one checkpoint."""
    for path in (run / "checkpoints" / str(step) / part).rglob("*"):
        if path.is_file() and (part == "meta" or path.parent.name == "d"):
            path.write_bytes(b"\0" * max(path.stat().st_size, 8))


@pytest.mark.parametrize("part", ["meta", "params"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_good_one(tmp_path, part):
    run = tmp_path / "ttt"
    write_tiny_run(run, steps=(1, 2, 3))
    damage(run, 3, part)
    with TestClient(create_app(str(tmp_path), analyse=False)) as c:
        listed = c.get("/api/options").json()["runs"]
        assert listed == [{"path": str(run), "game": "tictactoe", "kwargs": {}, "steps": [1, 2]}]
        view = new_game(c, human=1, opponent=f"search:{run}@2")
        assert view["moves"][0]["by"] == "agent"
        newest = c.post("/api/games", json={"game": "tictactoe", "opponent": f"search:{run}@3"})
        assert newest.status_code == 400 and "unknown opponent" in newest.json()["error"]


def test_a_run_with_no_usable_checkpoint_is_not_offered_nor_one_damaged_since(tmp_path):
    """A run whose every checkpoint is damaged is left out; a checkpoint damaged after it was
    listed (its arrays rewritten in place) is refused when a game asks for it, named."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_tiny_run(good, steps=(1,))
    write_tiny_run(bad, steps=(1, 2))
    damage(bad, 1, "meta")
    damage(bad, 2, "params")
    with TestClient(create_app(str(tmp_path), analyse=False)) as c:
        assert [r["path"] for r in c.get("/api/options").json()["runs"]] == [str(good)]
        damage(good, 1, "params")
        body = {"game": "tictactoe", "opponent": f"search:{good}@1"}
        refused = c.post("/api/games", json=body)
        assert refused.status_code == 400 and str(good) in refused.json()["error"], refused.text


def test_a_checkpoint_rewritten_since_it_was_read_is_read_again(tmp_path):
    """The server reads each checkpoint once, keyed by its folder's modification time: one
    damaged after it was listed (rewritten in place) is left out at the next listing."""
    from azjax.web.app import find_runs

    run = tmp_path / "ttt"
    write_tiny_run(run, steps=(1, 2, 3))
    assert find_runs(str(tmp_path))[0]["steps"] == [1, 2, 3]
    damage(run, 3, "meta")
    folder = run / "checkpoints" / "3"
    later = folder.stat().st_mtime_ns + 10**9
    os.utime(folder, ns=(later, later))
    assert find_runs(str(tmp_path))[0]["steps"] == [1, 2]


def test_serve_offers_more_games_on_request(runs, monkeypatch):
    from azjax.cli.serve import offer

    monkeypatch.setattr(games, "_REGISTRY", dict(games._REGISTRY))  # undone after the test
    offer("pgx:tic_tac_toe, tictactoe")
    assert "pgx:tic_tac_toe" in games.names()
    with TestClient(create_app(str(runs), analyse=False)) as c:
        listed = {g["name"] for g in c.get("/api/options").json()["games"]}
        assert "pgx:tic_tac_toe" in listed and "tictactoe" in listed
        view = new_game(c, game="pgx:tic_tac_toe", human=0, seed=1)
        moved = c.post(f"/api/games/{view['id']}/move", json={"action": 4, "ply": view["ply"]})
        assert moved.status_code == 200, moved.text
        assert moved.json()["ply"] == 2  # the move and the agent's reply
    with pytest.raises(ValueError, match="unknown game 'nope'"):
        offer("nope")


def test_an_illegal_action_is_named_beside_each_legal_action_and_its_notation(client):
    view = new_game(client, human=0, seed=1)
    error = post(client, f"/api/games/{view['id']}/move", {"action": 9, "ply": 0}).json()["error"]
    assert error.startswith("action 9 is not legal here; legal actions"), error
    pairs = re.findall(r"(\d+) \((\d+)\)", error)
    assert pairs == [(str(a), str(a + 1)) for a in range(9)], error


def test_the_analysis_says_whose_it_is_and_comes_back_after_undo(runs):
    path = runs / "group" / "ttt"
    with TestClient(create_app(str(runs), analyse=True)) as c:
        for kind, own in (("policy", False), ("search", True)):
            view = new_game(c, human=1, opponent=f"{kind}:{path}@2", seed=4)
            first = view["analysis"]
            assert first["own"] is own and first["played"] == view["moves"][0]["notation"]
            url = f"/api/games/{view['id']}"
            moved = post(c, f"{url}/move", {"action": clickable(view)[0], "ply": 1}).json()
            assert moved["analysis"]["played"] == moved["moves"][-1]["notation"]
            undone = post(c, f"{url}/undo", {"ply": moved["ply"]}).json()
            assert undone["ply"] == 1 and undone["analysis"] == first
            assert c.get(url).json()["analysis"] == first


def test_zoo_opponents_have_a_short_label_and_their_whole_record(client):
    zoo = client.get("/api/options").json()["zoo"]
    assert zoo, "the shipped zoo is offered"
    for model in zoo:
        assert model["label"] and len(model["label"]) <= 30, model
    connect4 = next(m for m in zoo if m["name"] == "connect4")
    assert connect4["label"] == "solver best move 88%"  # the first figure on its card
    assert connect4["strength"].startswith("solver best move 88.3%, result kept 98.3%, Pons ")


def test_a_models_label_is_a_figure_of_the_model_as_it_plays_by_default():
    """The first figure of `zoo:NAME` itself: not its raw policy's, nor other simulations'."""
    from azjax.web.app import headline_figure

    strength = {  # as cards key them
        "policy-zoo:m vs alphabeta:4": {"agent": "policy-zoo:m", "score": 0.2},
        "zoo:m:512 vs alphabeta:4": {"agent": "zoo:m:512", "score": 0.95},
        "zoo:m on the solver positions": {"agent": "zoo:m", "best_move": 0.8},
        "zoo:m vs mcts:100, 2 random opening plies": {"agent": "zoo:m", "score": 0.9},
    }
    assert headline_figure({"name": "m", "strength": strength}) == "solver best move 80%"
    del strength["zoo:m on the solver positions"]
    assert headline_figure({"name": "m", "strength": strength}) == "90% vs mcts:100"
    assert headline_figure({"name": "m", "strength": {}}) == ""


def test_opponents_are_offered_for_their_own_board_size_only():
    from azjax.web.app import opponents

    runs = [
        {"path": "runs/o8", "game": "othello", "kwargs": {"size": 8}, "steps": [5, 10]},
        {"path": "runs/o6", "game": "othello", "kwargs": {"size": 6}, "steps": [7]},
    ]
    eight = opponents(runs, "othello", {"size": 8})
    assert {"zoo:othello", "search:runs/o8@10", "policy:runs/o8@10"} <= set(eight)
    assert not any("othello6" in spec or "o6" in spec for spec in eight), eight
    six = opponents(runs, "othello", {"size": 6})
    assert {"zoo:othello6", "policy-zoo:othello6", "search:runs/o6@7"} <= set(six)
    assert "zoo:othello" not in six and not any("o8" in spec for spec in six), six


def test_an_opponent_is_compiled_when_chosen_and_said_to_be_ready(monkeypatch):
    from azjax.web import app

    monkeypatch.setattr(app, "_READY", set())
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


def test_the_server_compiles_each_games_default_opponent_at_start_up(monkeypatch):
    from azjax.web import app

    started = []
    monkeypatch.setattr(app, "warm_in_background", lambda pairs, analyse: started.extend(pairs))
    create_app(None, warm_up=True)
    assert {(g.name, spec) for g, spec in started} == {
        (name, session.default_opponent(games.make(name))) for name in games.names()
    }
