// deskd terminal page: xterm.js over ttyd's protocol (subprotocol "tty",
// binary frames whose first byte is the command).
import { Terminal } from '../vendor/xterm/lib/xterm.mjs';
import { FitAddon } from '../vendor/xterm/addon-fit/addon-fit.mjs';

// Client → server commands and server → client commands (ttyd's).
const IN_INPUT = '0', IN_RESIZE = '1', IN_PAUSE = '2', IN_RESUME = '3';
const OUT_OUTPUT = 0x30, OUT_TITLE = 0x31, OUT_PREFS = 0x32;

const q = new URLSearchParams(location.search);
const enc = new TextEncoder();
const dec = new TextDecoder();
const overlay = document.getElementById('overlay');

const term = new Terminal({
  cursorBlink: true,
  fontFamily: 'DejaVu Sans Mono, Liberation Mono, monospace',
  fontSize: 14,
  scrollback: 10000,
  allowProposedApi: true,
});
const fit = new FitAddon();
term.loadAddon(fit);
term.open(document.getElementById('term'));
fit.fit();

let ws = null;
let session = q.get('session') || '';
let attempts = 0;
let retry = null;
// Output written to xterm but not yet parsed; past the high mark the
// server is asked to pause, so a flood never piles up in the page.
let pending = 0;
let paused = false;
const HIGH = 512 * 1024, LOW = 64 * 1024;

function show(text, ms) {
  overlay.textContent = text;
  overlay.hidden = false;
  if (ms) setTimeout(() => { overlay.hidden = true; }, ms);
}

function wsURL() {
  const u = new URL('ws', location.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  // Always present (empty for a new session): it asks the server to tell
  // us the session id, so a reconnect reattaches and replays scrollback.
  u.searchParams.set('session', session);
  if (q.get('readonly') === '1') u.searchParams.set('readonly', '1');
  return u.href;
}

function send(cmd, data) {
  if (!ws || ws.readyState !== WebSocket.OPEN) return;
  const body = typeof data === 'string' ? enc.encode(data) : (data || new Uint8Array());
  const msg = new Uint8Array(1 + body.length);
  msg[0] = cmd.charCodeAt(0);
  msg.set(body, 1);
  ws.send(msg);
}

function connect() {
  clearTimeout(retry);
  document.body.dataset.state = 'connecting';
  ws = new WebSocket(wsURL(), ['tty']);
  ws.binaryType = 'arraybuffer';
  ws.onopen = () => {
    attempts = 0;
    document.body.dataset.state = 'connected';
    overlay.hidden = true;
    // The server replays the session's scrollback on every attach.
    term.reset();
    // The first frame is JSON without a command byte.
    ws.send(enc.encode(JSON.stringify({ AuthToken: '', columns: term.cols, rows: term.rows })));
    term.focus();
  };
  ws.onmessage = (ev) => {
    const b = new Uint8Array(ev.data);
    if (b.length === 0) return;
    const body = b.subarray(1);
    switch (b[0]) {
      case OUT_OUTPUT:
        pending += body.length;
        if (!paused && pending > HIGH) { paused = true; send(IN_PAUSE); }
        term.write(body, () => {
          pending -= body.length;
          if (paused && pending < LOW) { paused = false; send(IN_RESUME); }
        });
        break;
      case OUT_TITLE:
        document.title = dec.decode(body);
        break;
      case OUT_PREFS:
        prefs(JSON.parse(dec.decode(body) || '{}'));
        break;
    }
  };
  ws.onclose = (ev) => {
    ws = null;
    pending = 0;
    paused = false;
    document.body.dataset.state = 'disconnected';
    if (ev.code === 1000 && ev.reason === 'exit') {
      // The shell exited: the next connection starts a new one.
      session = '';
      show('Session ended; press any key for a new one');
      const once = term.onData(() => { once.dispose(); connect(); });
      return;
    }
    attempts++;
    const delay = Math.min(500 * 2 ** Math.min(attempts - 1, 6), 30000);
    show(`Disconnected; reconnecting in ${Math.round(delay / 1000)} s`);
    retry = setTimeout(connect, delay);
  };
}

// Preferences as ttyd sends them; "session" (deskd) names the session to
// reattach to after a disconnect.
function prefs(p) {
  for (const [k, v] of Object.entries(p)) {
    if (k === 'session') {
      session = String(v);
      const u = new URL(location.href);
      u.searchParams.set('session', session);
      history.replaceState(null, '', u.href);
    } else if (k in term.options) {
      term.options[k] = v;
    }
  }
}

term.onData((d) => send(IN_INPUT, d));
term.onBinary((d) => send(IN_INPUT, Uint8Array.from(d, (c) => c.charCodeAt(0))));
term.onResize(({ cols, rows }) => {
  send(IN_RESIZE, JSON.stringify({ columns: cols, rows }));
  show(`${cols}×${rows}`, 800);
});
new ResizeObserver(() => fit.fit()).observe(document.getElementById('term'));

window.deskdTerm = { term, get socket() { return ws; } };
connect();
