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


def board_cells(page) -> list[str]:
    """The marks of the nine cells as drawn: "X", "O" or "" (from the SVG)."""
    return page.evaluate(
        """() => {
          const svg = document.querySelector('#board svg');
          const cells = Array(9).fill('');
          const size = svg.viewBox.baseVal;
          const m = size.width / 3;
          const at = (x, y) => Math.min(2, Math.floor(y / m)) * 3 + Math.min(2, Math.floor(x / m));
          for (const l of svg.querySelectorAll('line[stroke="#d1495b"]'))
            cells[at((+l.getAttribute('x1') + +l.getAttribute('x2')) / 2,
                     (+l.getAttribute('y1') + +l.getAttribute('y2')) / 2)] = 'X';
          for (const c of svg.querySelectorAll('circle[stroke="#2e86ab"]'))
            cells[at(+c.getAttribute('cx'), +c.getAttribute('cy'))] = 'O';
          return cells;
        }"""
    )


def open_page(browser, server: str, width: int, height: int) -> tuple:
    """The page at `server` in a `width` x `height` window, ready, and the list that collects
    its script errors."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server)
    page.wait_for_selector("body[data-ready=true]")
    return page, errors


def test_play_tictactoe_by_clicking(browser, server, tmp_path):
    page, errors = open_page(browser, server, 1100, 760)
    page.select_option("#game", "tictactoe")
    page.select_option("#opponent", "random")
    page.select_option("#side", "0")
    page.click("#new")
    page.wait_for_selector("#board svg .move")
    assert page.locator("#board .move").count() == 9
    assert page.text_content("#status") == "Your move (X)."

    for _ in range(5):
        if page.get_attribute("#board", "data-over") == "true":
            break
        before = board_cells(page)
        ply = page.get_attribute("#board", "data-ply")
        page.locator("#board .move").first.click()
        page.wait_for_function(
            f"document.querySelector('#board').dataset.ply !== '{ply}'", timeout=120_000
        )
        after = board_cells(page)
        added = [i for i in range(9) if before[i] != after[i]]
        assert all(before[i] == "" for i in added), "a mark was overwritten"
        assert sorted(after[i] for i in added) in (["X"], ["O", "X"])  # mine, and the reply
        if page.get_attribute("#board", "data-over") != "true":
            assert len(added) == 2, "the agent did not answer"
            moves = page.locator("#moves li").all_text_contents()
            assert moves[-1].endswith("(agent)")

    assert page.get_attribute("#board", "data-over") == "true"
    result = page.locator("#result")
    assert result.is_visible()
    assert result.text_content() in ("You win!", "You lose.", "Draw.")
    assert page.locator("#board .move").count() == 0
    assert not errors, errors
    page.screenshot(path=str(tmp_path / "end.png"))
    assert (tmp_path / "end.png").stat().st_size > 1000


def test_hint_says_it_is_thinking_and_who_answers(browser, server):
    page, errors = open_page(browser, server, 1100, 760)
    page.select_option("#game", "tictactoe")
    page.select_option("#opponent", "random")
    page.click("#new")
    page.wait_for_selector("#board svg .move")
    page.evaluate(  # every text the hint line shows, with the state of the page at the time
        """() => {
          window.seen = [];
          new MutationObserver(() => window.seen.push([
            document.querySelector('#hint-text').textContent,
            document.querySelector('#hint').disabled,
            document.body.classList.contains('busy'),
          ])).observe(document.querySelector('#hint-text'), {childList: true});
        }"""
    )
    page.click("#hint")
    page.wait_for_function("document.querySelector('#hint-text').textContent.startsWith('Hint')")
    seen = page.evaluate("window.seen")
    assert seen[0] == ["Thinking (pure MCTS with 200 simulations)…", True, True]
    assert seen[-1][0].startswith("Hint from pure MCTS with 200 simulations: try ")
    assert not page.is_disabled("#hint") and not errors, errors


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
    page.select_option("#opponent", "zoo:connect4")
    page.click("#new")
    page.wait_for_selector("#board svg .move")
    board, card = page.locator("#board").bounding_box(), page.locator("#agent-card").bounding_box()
    assert card["x"] >= board["x"] + board["width"]  # beside the board, not under it
    assert not errors, errors


def test_the_first_move_of_an_opponent_says_it_is_compiling(browser, server, monkeypatch):
    from azjax.web import app

    monkeypatch.setattr(app, "_READY", set())
    page, _ = open_page(browser, server, 1100, 760)
    page.select_option("#game", "tictactoe")
    page.select_option("#opponent", "greedy")
    page.click("#new")
    page.wait_for_selector("#board svg .move")
    page.evaluate(
        """() => {
          window.seen = [];
          const status = document.querySelector('#status');
          new MutationObserver(() => window.seen.push(status.textContent))
            .observe(status, {childList: true});
        }"""
    )
    page.locator("#board .move").first.click()
    page.wait_for_function("document.querySelector('#board').dataset.ply === '2'", timeout=120_000)
    seen = page.evaluate("window.seen")
    assert seen[0].startswith("greedy is compiling"), seen
    page.locator("#board .move").first.click()  # compiled now: it only thinks
    page.wait_for_function("document.querySelector('#board').dataset.ply === '4'", timeout=120_000)
    assert "greedy is thinking…" in page.evaluate("window.seen"), page.evaluate("window.seen")


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
    page, errors = open_page(browser, server, 1000, 700)
    page.select_option("#game", name)
    opponents = page.locator("#opponent option").all_text_contents()
    assert ("alphabeta:2" in opponents) == (name == "pgx:hex"), opponents  # none over dice
    page.select_option("#opponent", "random")
    page.select_option("#side", "0")
    page.click("#new")
    page.wait_for_selector("#move-menu, #buttons button", timeout=120_000)
    assert page.locator(f'#board svg[aria-label="{name} board"]').count() == 1
    assert page.locator("#board .move").count() == 0
    if menu:
        labels = page.locator("#move-menu option").all_text_contents()
        assert labels == [str(a) for a in range(121)]  # every cell; the swap comes later
        page.select_option("#move-menu", "60")
        page.click("#play-move")
        chosen = "60"
    else:
        chosen = page.locator("#buttons button").first.text_content()
        page.locator("#buttons button").first.click()
    page.wait_for_function("document.querySelector('#board').dataset.ply !== '0'", timeout=120_000)
    moves = page.locator("#moves li").all_text_contents()
    assert moves[0] == f"Player 1 {chosen}", moves
    assert not errors, errors
