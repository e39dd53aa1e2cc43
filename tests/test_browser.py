"""End to end in headless Chromium: open the page, play Tic-Tac-Toe by clicking, see the result.

Needs Debian's `chromium` at /usr/bin/chromium (driven by Playwright). Under `CI=true` a
missing browser fails the test; elsewhere the test is skipped with the reason. Screenshots are
written under the test's tmp dir.
"""

from __future__ import annotations

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

    from azjax.web import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app, "warm_in_background", lambda pairs, analyse: None)
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
    page.click("#new")
    page.wait_for_selector(wait, timeout=120_000)


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
    from azjax.web import app

    monkeypatch.setattr(app, "_READY", set())
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


@pytest.mark.parametrize(
    ("name", "menu"), [("pgx:hex", True), ("pgx:backgammon", False)], ids=["hex", "backgammon"]
)
def test_a_pgx_game_is_drawn_by_pgx_and_played_from_its_move_list(
    browser, server, monkeypatch, name, menu
):
    """pgx's drawing has no click targets: the legal moves are listed under it (Hex's 121 in
    one menu, Backgammon's few as buttons), and choosing one plays it."""
    pytest.importorskip("pgx")
    import games
    from azjax.cli.serve import offer

    monkeypatch.setattr(games, "_REGISTRY", dict(games._REGISTRY))  # undone after the test
    offer(name)
    game = games.make(name)
    page, errors = open_page(browser, server, 1000, 700)
    page.select_option("#game", name)
    opponents = page.locator("#opponent option").all_text_contents()
    assert ("alphabeta:2" in opponents) == (name == "pgx:hex"), opponents  # none over dice
    start(page, name, "random", wait="#move-menu, #buttons button")
    assert page.locator(f'#board svg[aria-label="{name} board"]').count() == 1
    assert page.locator("#board .move").count() == 0
    if menu:
        labels = page.locator("#move-menu option").all_text_contents()
        assert labels == [game.format_action(a) for a in range(121)]  # every cell; no swap yet
        page.select_option("#move-menu", index=60)
        page.click("#play-move")
        chosen = labels[60]
    else:
        chosen = page.locator("#buttons button").first.text_content()
        page.locator("#buttons button").first.click()
    page.wait_for_function("document.querySelector('#board').dataset.ply !== '0'", timeout=120_000)
    moves = page.locator("#moves li").all_text_contents()
    assert moves[0] == f"{game.players[0]} {chosen}", moves
    assert not errors, errors
