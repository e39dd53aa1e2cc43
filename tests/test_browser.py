"""End to end in headless Chromium: open the page, play by clicking, see the result; every game
fits a phone's width.

Needs Debian's `chromium` at /usr/bin/chromium (driven by Playwright). Under `CI=true` a
missing browser fails the test; elsewhere the test is skipped with the reason. Screenshots are
written under the test's tmp dir.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import socket
import threading
import time

import pytest

CHROMIUM = pathlib.Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium, one per test module."""
    if not CHROMIUM.exists():
        reason = f"no browser at {CHROMIUM} (apt-get install -y chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def server():
    """The app on a free port, one per test module. Choosing an opponent compiles nothing ahead
    here (tests/test_serve.py tests the warm-up): a compile in the background would outlive the
    test and take CPU from the rest of the suite."""
    import uvicorn

    import games
    from azjax.cli.serve import offer
    from azjax.web import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app, "warm_in_background", lambda pairs, analyse: None)
        patch.setattr(games, "_REGISTRY", dict(games._REGISTRY))  # undone after the module
        if importlib.util.find_spec("pgx"):
            offer("pgx:hex,pgx:backgammon")
        config = uvicorn.Config(app.create_app(None, analyse=False), port=port, log_level="warning")
        instance = uvicorn.Server(config)
        thread = threading.Thread(target=instance.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not instance.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
        instance.should_exit = True
        thread.join(timeout=10)


def open_page(browser, server: str, width: int = 1100, height: int = 760) -> tuple:
    """The page at `server` in a `width` x `height` window, ready, and the list that collects
    its script errors."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server)
    page.wait_for_selector("body[data-ready=true]")
    return page, errors


def start(page, game: str, opponent: str, wait: str = "#board svg .move") -> None:
    """A new game of `game` against `opponent`, the person moving first."""
    page.select_option("#game", game)
    page.select_option("#opponent", opponent)
    page.select_option("#side", "0")
    page.evaluate("delete document.querySelector('#board').dataset.ply")  # set by the new game
    page.click("#new")
    page.wait_for_selector("#board[data-ply]", timeout=120_000)
    page.wait_for_selector(wait)


def watch(page, selector: str) -> None:
    """Collect in `window.seen` every text `selector` shows, with whether the hint button is
    disabled and the page busy at the time."""
    page.evaluate(
        """(selector) => {
          window.seen = [];
          const node = document.querySelector(selector);
          new MutationObserver(() => window.seen.push([
            node.textContent,
            document.querySelector('#hint').disabled,
            document.body.classList.contains('busy'),
          ])).observe(node, {childList: true});
        }""",
        selector,
    )


def play_first_cell(page, ply: str) -> None:
    page.locator("#board .move").first.click()
    page.wait_for_function(
        f"document.querySelector('#board').dataset.ply !== '{ply}'", timeout=120_000
    )


def test_play_tictactoe_by_clicking(browser, server, tmp_path):
    page, errors = open_page(browser, server)
    start(page, "tictactoe", "random")
    assert page.text_content("#status") == "Your move (X)."
    while page.get_attribute("#board", "data-over") != "true":
        ply = int(page.get_attribute("#board", "data-ply"))
        play_first_cell(page, str(ply))
        moves = page.locator("#moves li").all_text_contents()
        assert page.locator("#board .move").count() == (
            0 if page.get_attribute("#board", "data-over") == "true" else 9 - len(moves)
        )
        if len(moves) == ply + 2:  # the agent answered
            assert moves[-1].endswith("(agent)")
        else:
            assert len(moves) == ply + 1 and page.get_attribute("#board", "data-over") == "true"
    assert page.locator("#result").is_visible()
    assert page.locator("#result").text_content() in ("You win!", "You lose.", "Draw.")
    assert not errors, errors
    page.screenshot(path=str(tmp_path / "end.png"))
    assert (tmp_path / "end.png").stat().st_size > 1000


def test_the_page_says_what_it_waits_for(browser, server, monkeypatch):
    """A hint says it is thinking and who answers; an opponent's first move on the server says
    it compiles, the next that it thinks."""
    from azjax import session

    monkeypatch.setattr(session, "_PREPARED", set())
    page, errors = open_page(browser, server)
    start(page, "tictactoe", "greedy")
    watch(page, "#hint-text")
    page.click("#hint")
    page.wait_for_function("document.querySelector('#hint-text').textContent.startsWith('Hint')")
    seen = page.evaluate("window.seen")
    assert seen[0] == ["Thinking (pure MCTS with 200 simulations)…", True, True]
    assert seen[-1][0].startswith("Hint from pure MCTS with 200 simulations: try ")
    assert not page.is_disabled("#hint")
    watch(page, "#status")
    play_first_cell(page, "0")
    assert page.evaluate("window.seen")[0][0].startswith("greedy is compiling")
    play_first_cell(page, "2")  # compiled now: it only thinks
    assert "greedy is thinking…" in [text for text, *_ in page.evaluate("window.seen")]
    assert not errors, errors


def test_opponent_labels_fit_and_the_card_shows_beside_the_board(browser, server):
    page, errors = open_page(browser, server, 1280, 800)
    page.select_option("#game", "connect4")
    labels = page.locator("#opponent option").all_text_contents()
    assert "zoo: connect4 (solver best move 88%)" in labels, labels
    assert max(len(label) for label in labels) <= 50, labels
    select, setup = page.locator("#opponent").bounding_box(), page.locator("#setup").bounding_box()
    assert select["x"] + select["width"] <= setup["x"] + setup["width"]  # inside the card
    page.select_option("#opponent", "zoo:connect4")
    assert page.is_visible("#agent-card")
    figures = page.locator("#card-figures li").all_text_contents()
    assert figures[0].startswith("solver best move 88.3%, result kept 98.3%, Pons begin-hard ")
    assert len(figures) > 2
    page.select_option("#opponent", "random")
    assert not page.is_visible("#agent-card")
    start(page, "connect4", "zoo:connect4")
    board, card = page.locator("#board").bounding_box(), page.locator("#agent-card").bounding_box()
    assert card["x"] >= board["x"] + board["width"]  # beside the board, not under it
    assert not errors, errors


def test_every_game_fits_a_phone(browser, server):
    """At 390 px no game scrolls sideways, from its setup to its moves."""
    page, errors = open_page(browser, server, 390, 800)
    for name in page.eval_on_selector_all("#game option", "all => all.map(o => o.value)"):
        start(page, name, "random", wait="#board svg")
        width = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert width[0] <= width[1], (name, width)
    assert not errors, errors


def test_hex_is_played_on_its_cells_and_backgammon_from_its_moves(browser, server):
    """pgx draws them; Hex's legal cells are clickable, a1 top left, and both list their moves
    in notation; players are named by colour; a trained run is a game's first choice."""
    pytest.importorskip("pgx")
    import games

    page, errors = open_page(browser, server, 1000, 700)
    run = {"path": "/r/hex", "game": "pgx:hex", "kwargs": {}, "steps": [3]}
    page.route(  # as if the server had found a run of Hex
        "**/api/options",
        lambda route: route.fulfill(json={**route.fetch().json(), "runs": [run]}),
    )
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#game", "pgx:hex")
    assert page.input_value("#opponent") == "search:/r/hex@3"  # no zoo model: the run
    hex_game = games.make("pgx:hex")
    start(page, "pgx:hex", "random")
    assert page.locator('#board svg[aria-label="pgx:hex board"]').count() == 1
    assert page.locator("#board .move").count() == 121
    labels = page.locator("#move-menu option").all_text_contents()
    assert labels == [hex_game.format_action(a) for a in range(121)]  # every cell; no swap yet
    page.locator('#board .move[data-action="13"]').click()
    page.wait_for_function("document.querySelector('#board').dataset.ply !== '0'", timeout=120_000)
    moves = page.locator("#moves li").all_text_contents()
    assert moves[0] == "Black c2" and moves[1].startswith("White "), moves
    assert page.text_content("#status") == "Your move (Black)."
    assert page.locator("#board .move").count() == 119 and "swap" not in labels

    start(page, "pgx:backgammon", "random", wait="#buttons button")
    assert "alphabeta:2" not in page.locator("#opponent option").all_text_contents()  # dice
    chosen = page.locator("#buttons button").first.text_content()
    page.locator("#buttons button").first.click()
    page.wait_for_function("document.querySelector('#board').dataset.ply !== '0'", timeout=120_000)
    assert page.locator("#moves li").all_text_contents()[0] == f"Black {chosen}"
    assert not errors, errors
