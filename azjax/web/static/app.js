// azjax browser play: pick a game and an opponent, click to move, watch the agent reply.
"use strict";

const $ = (id) => document.getElementById(id);
const FRAME_MS = 260; // one Chain Reaction explosion level
const MAX_BUTTONS = 12; // more moves off the board than this: one menu instead of buttons
let options = null;
let current = null; // the latest view from the server
let busy = false;
let chosenOpponent = null; // picked by the person: kept across games and sizes that offer it
const TITLES = {
  tictactoe: "Tic-Tac-Toe",
  connect4: "Connect Four",
  othello: "Othello",
  dots_and_boxes: "Dots and Boxes",
  chain_reaction: "Chain Reaction",
  "pgx:backgammon": "Backgammon (pgx)",
  "pgx:hex": "Hex (pgx)",
};

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function sizeValues() {
  const kwargs = {};
  for (const select of $("sizes").querySelectorAll("select")) {
    kwargs[select.dataset.key] = Number(select.value);
  }
  return kwargs;
}

function sameKwargs(a, b) {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].every((k) => a[k] === b[k]);
}

function fillSetup() {
  const game = options.games.find((g) => g.name === $("game").value);
  $("sizes").replaceChildren();
  for (const [key, spec] of Object.entries(game.sizes)) {
    const label = document.createElement("label");
    label.textContent = key + " ";
    const select = document.createElement("select");
    select.dataset.key = key;
    select.id = "size-" + key;
    for (const v of spec.values) select.add(new Option(String(v), String(v), false, v === spec.default));
    select.addEventListener("change", fillOpponents);
    label.append(select);
    $("sizes").append(label);
  }
  fillOpponents();
}

function fillOpponents() {
  const name = $("game").value;
  const kwargs = sizeValues();
  $("opponent").replaceChildren();
  let fallback = null; // the zoo's model for this game, else a trained run, else pure MCTS
  for (const model of options.zoo) {
    if (model.game !== name || !sameKwargs(model.kwargs, kwargs)) continue;
    const figure = model.label ? ` (${model.label})` : "";
    $("opponent").add(new Option(`zoo: ${model.name}${figure}`, `zoo:${model.name}`));
    $("opponent").add(new Option(`zoo policy: ${model.name}`, `policy-zoo:${model.name}`));
    if (model.default) fallback = `zoo:${model.name}`;
  }
  const baselines = options.games.find((g) => g.name === name).baselines;
  for (const spec of baselines) $("opponent").add(new Option(spec, spec));
  for (const run of options.runs) {
    if (run.game !== name || !sameKwargs(run.kwargs, kwargs)) continue;
    const step = run.steps[run.steps.length - 1];
    for (const kind of ["search", "policy"]) {
      const spec = `${kind}:${run.path}@${step}`;
      const name = run.path.split("/").slice(-2).join("/");
      $("opponent").add(new Option(`${kind}: ${name} (step ${step})`, spec));
      fallback ??= spec;
    }
  }
  const keep = [...$("opponent").options].some((o) => o.value === chosenOpponent);
  $("opponent").value = keep ? chosenOpponent : (fallback ?? options.fallback);
  opponentChosen();
}

function zooModel(spec) {
  const name = spec.replace(/^(policy-)?zoo:/, "");
  return spec.includes("zoo:") ? options.zoo.find((m) => m.name === name) : undefined;
}

function showCard(spec) {
  // The chosen zoo model's strength record, beside the board (the option shows one figure).
  const model = zooModel(spec);
  $("agent-card").hidden = !model || model.strength === "-";
  if ($("agent-card").hidden) return;
  $("card-title").textContent = `${model.name}: measured strength`;
  $("card-figures").replaceChildren(...model.strength.split("; ").map((text) => {
    const li = document.createElement("li");
    li.textContent = text;
    return li;
  }));
}

function opponentChosen() {
  // Show its card, and have the server compile it now rather than on its first move.
  showCard($("opponent").value);
  const body = { game: $("game").value, kwargs: sizeValues(), opponent: $("opponent").value };
  api("/api/warm", body).catch(() => {});
}

function thinking(view) {
  return view.ready
    ? `${view.opponent} is thinking…`
    : `${view.opponent} is compiling (its first move on this server takes seconds)…`;
}

function playerName(view, player) {
  return view.players[player];
}

function renderMoves(view) {
  $("moves").replaceChildren();
  for (const m of view.moves) {
    const li = document.createElement("li");
    li.textContent = `${playerName(view, m.player)} ${m.notation}` + (m.by === "agent" ? " (agent)" : "");
    $("moves").append(li);
  }
  $("moves").scrollTop = $("moves").scrollHeight;
}

function renderEvaluation(view) {
  const ev = view.analysis;
  $("analysis").hidden = !ev;
  if (!ev) return;
  const v = ev.value;
  const mover = playerName(view, 1 - view.human);
  // The agent's own search, or a separate one (a baseline opponent has none to show).
  $("eval-label").textContent = ev.own
    ? `${mover}'s position before it played ${ev.played}, by its own search (${ev.source}):`
    : `${mover}'s position before ${view.opponent} played ${ev.played}, by a separate ` +
      `analysis (${ev.source}), not by ${view.opponent}:`;
  $("eval-value").textContent = (v >= 0 ? "+" : "") + v.toFixed(2);
  $("eval-bar").style.width = `${Math.round((v + 1) * 50)}%`;
  $("eval-moves").textContent = (ev.own ? "its search favoured " : "that analysis favoured ") +
    ev.moves.map((m) => `${m.move} ${Math.round(m.share * 100)}%`).join(", ");
}

function renderStatus(view) {
  const you = playerName(view, view.human);
  $("score").hidden = !view.score;
  if (view.score) {
    $("score").textContent = `${view.players[0]} ${view.score[0]} – ${view.players[1]} ${view.score[1]}`;
  }
  if (view.over) {
    const text = { win: "You win!", loss: "You lose.", draw: "Draw." }[view.result];
    $("result").textContent = text;
    $("result").className = view.result;
    $("result").hidden = false;
    $("status").textContent = `Game over. You played ${you}.`;
  } else {
    $("result").hidden = true;
    $("status").textContent = view.to_move === view.human ? `Your move (${you}).` : thinking(view);
  }
}

function renderButtons(view) {
  // Moves with no place on the board, and every move of a game drawn by pgx: a button each,
  // or one menu when there are many.
  $("buttons").replaceChildren();
  if (view.buttons.length > MAX_BUTTONS) {
    const label = document.createElement("label");
    label.textContent = "Move ";
    const menu = document.createElement("select");
    menu.id = "move-menu";
    for (const b of view.buttons) menu.add(new Option(b.label, String(b.action)));
    label.append(menu);
    const play = document.createElement("button");
    play.type = "button";
    play.id = "play-move";
    play.textContent = "Play";
    play.addEventListener("click", () => move(Number(menu.value)));
    $("buttons").append(label, play);
    return;
  }
  for (const b of view.buttons) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = b.label;
    button.addEventListener("click", () => move(b.action));
    $("buttons").append(button);
  }
}

function showBoard(svgText) {
  $("board").innerHTML = svgText;
}

async function render(view) {
  current = view;
  $("hint-text").hidden = true;
  for (const ply of view.new) {
    for (const [i, frame] of ply.frames.entries()) {
      showBoard(frame);
      if (ply.frames.length > 1) {  // an explosion, level by level
        $("board").dataset.frame = `${ply.notation} ${i + 1}/${ply.frames.length}`;
        await sleep(FRAME_MS);
      }
    }
  }
  delete $("board").dataset.frame;
  showBoard(view.svg);
  for (const el of $("board").querySelectorAll(".move")) {
    el.addEventListener("click", () => move(Number(el.dataset.action)));
  }
  renderButtons(view);
  renderMoves(view);
  renderEvaluation(view);
  renderStatus(view);
  $("board").dataset.ply = String(view.ply);
  $("board").dataset.over = String(view.over);
  renderButtonsState(view);
}

function renderButtonsState(view) {
  const yourTurn = !view.over && view.to_move === view.human;
  $("hint").disabled = !yourTurn;
  $("hint").title = `Ask ${view.analyst} for the best moves here`;
  $("undo").disabled = !view.moves.some((m) => m.by === "human");
}

async function guarded(work) {
  if (busy) return;
  busy = true;
  document.body.classList.add("busy");
  showError("");
  try {
    await work();
  } catch (err) {
    showError(err.message);
  } finally {
    busy = false;
    document.body.classList.remove("busy");
  }
}

function newGame() {
  return guarded(async () => {
    $("analysis").hidden = true;
    const known = current && current.ready && current.opponent === $("opponent").value;
    $("status").textContent = known ? "Starting…"
      : "Starting… (an opponent's first game on this server compiles it: seconds)";
    const view = await api("/api/games", {
      game: $("game").value,
      kwargs: sizeValues(),
      opponent: $("opponent").value,
      human: Number($("side").value),
    });
    await render(view);
  });
}

function move(action) {
  return guarded(async () => {
    if (!current || current.over) return;
    $("status").textContent = thinking(current);
    for (const el of $("board").querySelectorAll(".move")) el.classList.add("spent");
    try {
      await render(await api(`/api/games/${current.id}/move`, { action, ply: current.ply }));
    } catch (err) {
      renderStatus(current);
      for (const el of $("board").querySelectorAll(".move")) el.classList.remove("spent");
      throw err;
    }
  });
}

function undo() {
  return guarded(async () => {
    await render(await api(`/api/games/${current.id}/undo`, { ply: current.ply }));
  });
}

function hint() {
  return guarded(async () => {
    // A search takes seconds: say so at once, and keep the buttons off until it answers.
    $("hint").disabled = $("undo").disabled = true;
    $("hint-text").textContent = `Thinking (${current.analyst})…`;
    $("hint-text").hidden = false;
    $("hint-text").classList.add("thinking");
    try {
      const advice = await api(`/api/games/${current.id}/hint`, { ply: current.ply });
      const moves = advice.moves.map((m) => `${m.move} (${Math.round(m.share * 100)}%)`).join(", ");
      const v = advice.value;
      $("hint-text").textContent =
        `Hint from ${advice.source}: try ${moves}. Value for you: ${(v >= 0 ? "+" : "") + v.toFixed(2)}`;
    } catch (err) {
      $("hint-text").hidden = true;
      throw err;
    } finally {
      $("hint-text").classList.remove("thinking");
      renderButtonsState(current);
    }
  });
}

async function start() {
  try {
    options = await api("/api/options");
  } catch (err) {
    showError(`Cannot reach the server: ${err.message}`);
    return;
  }
  for (const g of options.games) $("game").add(new Option(TITLES[g.name] || g.name, g.name));
  $("game").addEventListener("change", fillSetup);
  $("opponent").addEventListener("change", () => {
    chosenOpponent = $("opponent").value;
    opponentChosen();
  });
  $("new").addEventListener("click", newGame);
  $("undo").addEventListener("click", undo);
  $("hint").addEventListener("click", hint);
  fillSetup();
  document.body.dataset.ready = "true";
}

start();
