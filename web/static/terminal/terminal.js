// deskd terminal page: xterm.js over ttyd's protocol (subprotocol "tty",
// binary frames whose first byte is the command).
import { Terminal } from '../vendor/xterm/lib/xterm.mjs';
import { FitAddon } from '../vendor/xterm/addon-fit/addon-fit.mjs';
import { WebglAddon } from '../vendor/xterm/addon-webgl/addon-webgl.mjs';
import { WebLinksAddon } from '../vendor/xterm/addon-web-links/addon-web-links.mjs';
import { Unicode11Addon } from '../vendor/xterm/addon-unicode11/addon-unicode11.mjs';
import { SearchAddon } from '../vendor/xterm/addon-search/addon-search.mjs';
import { ImageAddon } from '../vendor/xterm/addon-image/addon-image.mjs';

// Client → server commands and server → client commands (ttyd's).
const IN_INPUT = '0', IN_RESIZE = '1', IN_PAUSE = '2', IN_RESUME = '3';
const OUT_OUTPUT = 0x30, OUT_TITLE = 0x31, OUT_PREFS = 0x32;

const q = new URLSearchParams(location.search);
const enc = new TextEncoder();
const dec = new TextDecoder();
const overlay = document.getElementById('overlay');

const store = (() => { try { return window.localStorage; } catch { return null; } })();
const fontSize = (v) => Math.min(40, Math.max(6, parseInt(v, 10) || 14));
const term = new Terminal({
  cursorBlink: true,
  fontFamily: 'DejaVu Sans Mono, Liberation Mono, Noto Color Emoji, monospace',
  fontSize: fontSize(q.get('fontSize') ?? store?.getItem('deskd.fontSize') ?? 14),
  scrollback: 10000,
  allowProposedApi: true,
});
const fit = new FitAddon();
term.loadAddon(fit);
term.open(document.getElementById('term'));

// What a ttyd user expects, each reported in window.deskdTerm.addons:
// the WebGL renderer (the DOM renderer when WebGL is missing or its
// context is lost), clickable links, Unicode 11 widths (emoji, CJK),
// search (Ctrl+Shift+F), and images (sixel, iTerm2 inline).
const addons = {};
try {
  const webgl = new WebglAddon();
  webgl.onContextLoss(() => { webgl.dispose(); addons.renderer = 'dom'; });
  term.loadAddon(webgl);
  addons.renderer = 'webgl';
} catch (err) {
  addons.renderer = 'dom';
  addons.webglError = String(err && err.message || err);
}
term.loadAddon(new WebLinksAddon((ev, uri) => { if (ev.ctrlKey || ev.metaKey || !('ontouchstart' in window)) window.open(uri, '_blank', 'noopener'); }));
addons.webLinks = true;
term.loadAddon(new Unicode11Addon());
term.unicode.activeVersion = '11';
addons.unicode = term.unicode.activeVersion;
const search = new SearchAddon();
term.loadAddon(search);
addons.search = true;
term.loadAddon(new ImageAddon({ sixelSupport: true, iipSupport: true }));
addons.image = true;
fit.fit();

// Copy on select, as in most terminals (where the browser lets a page
// write the clipboard); Ctrl+Shift+C / Ctrl+Shift+V copy and paste.
term.onSelectionChange(() => {
  const sel = term.getSelection();
  if (sel && navigator.clipboard?.writeText) navigator.clipboard.writeText(sel).catch(() => {});
});
function setFont(n) {
  term.options.fontSize = fontSize(n);
  try { store?.setItem('deskd.fontSize', String(term.options.fontSize)); } catch { /* private mode */ }
  fit.fit();
  show(`Font ${term.options.fontSize} px`, 800);
}
term.attachCustomKeyEventHandler((e) => {
  if (e.type !== 'keydown') return true;
  const ctrl = e.ctrlKey || e.metaKey;
  if (ctrl && e.shiftKey && e.code === 'KeyC') {
    const sel = term.getSelection();
    if (sel) navigator.clipboard?.writeText(sel).catch(() => {});
    return false;
  }
  if (ctrl && e.shiftKey && e.code === 'KeyV') {
    navigator.clipboard?.readText?.().then((t) => term.paste(t)).catch(() => {});
    return false;
  }
  if (ctrl && e.shiftKey && e.code === 'KeyF') { openSearch(); return false; }
  if (ctrl && !e.shiftKey && (e.key === '=' || e.key === '+')) { setFont(term.options.fontSize + 1); return false; }
  if (ctrl && !e.shiftKey && e.key === '-') { setFont(term.options.fontSize - 1); return false; }
  if (ctrl && !e.shiftKey && e.key === '0') { setFont(14); return false; }
  return true;
});

// The search box: Enter finds the next match, Shift+Enter the previous,
// Escape closes it.
const searchBox = document.getElementById('search');
const searchInput = document.getElementById('searchtext');
function openSearch() {
  searchBox.hidden = false;
  searchInput.value = term.getSelection() || searchInput.value;
  searchInput.select();
  searchInput.focus();
}
searchInput.addEventListener('keydown', (e) => {
  if (e.key === 'Enter') {
    e.preventDefault();
    const found = e.shiftKey ? search.findPrevious(searchInput.value) : search.findNext(searchInput.value);
    searchBox.dataset.found = String(found);
  } else if (e.key === 'Escape') {
    search.clearDecorations();
    searchBox.hidden = true;
    term.focus();
  }
});

let ws = null;
let session = q.get('session') || '';
let attempts = 0;
let retry = null;
// Output written to xterm but not yet parsed; past the high mark the
// server is asked to pause, so a flood never piles up in the page.
let pending = 0;
let paused = false;
const HIGH = 512 * 1024, LOW = 64 * 1024;

// The reconnect banner: the same session is reattached (its scrollback
// replayed) on the next connection; "Reconnect now" skips the wait.
const bannerEl = document.getElementById('banner');
function banner(text) {
  document.getElementById('bannertext').textContent = text;
  bannerEl.hidden = false;
}
document.getElementById('reconnect').addEventListener('click', () => { attempts = 0; connect(); });

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
    bannerEl.hidden = true;
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
    banner(`Disconnected; reattaching to the session in ${Math.round(delay / 1000)} s`);
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
// ?cast=ID plays a terminal recording (asciicast v2, record/ routes)
// instead of connecting: its output at its pace (?speed=N, 1 by
// default), at its size and its resizes; keystrokes it holds are not
// shown. Space pauses, the right arrow skips 5 s, + and - change speed.
const MAX_CAST_LINE = 1 << 20;
const MAX_CAST_EVENTS = 1000000;

function parseCast(text) {
  const lines = text.split('\n');
  let header;
  try { header = JSON.parse(lines[0]); } catch { header = null; }
  if (!header || header.version !== 2 || !(header.width > 0) || !(header.height > 0)) {
    throw new Error('not an asciicast v2 recording');
  }
  const events = [];
  let last = 0;
  for (let i = 1; i < lines.length && events.length < MAX_CAST_EVENTS; i++) {
    const l = lines[i];
    if (!l || l.length > MAX_CAST_LINE) continue;
    let ev;
    try { ev = JSON.parse(l); } catch { continue; } // a line cut by a crash
    if (!Array.isArray(ev) || ev.length !== 3 || typeof ev[0] !== 'number' || typeof ev[2] !== 'string') continue;
    if (ev[1] !== 'o' && ev[1] !== 'r') continue;
    last = Math.max(last, ev[0]);
    events.push({ t: last, code: ev[1], data: ev[2] });
  }
  return { header, events, duration: last };
}

function playCast(id) {
  const clamp = (n, lo, hi) => Math.min(hi, Math.max(lo, n));
  const sizeOf = (s) => {
    const m = /^(\d{1,4})x(\d{1,4})$/.exec(s);
    return m ? [clamp(+m[1], 2, 1000), clamp(+m[2], 1, 500)] : null;
  };
  const r = { ended: false, position: 0, speed: clamp(parseFloat(q.get('speed')) || 1, 0.1, 64), paused: false, error: '' };
  window.deskdTerm.replay = r;
  document.body.dataset.state = 'replay';
  fetch('../record/' + encodeURIComponent(id), { cache: 'no-store' })
    .then((resp) => (resp.ok ? resp.text() : resp.text().then((t) => { throw new Error(t.trim() || 'HTTP ' + resp.status); })))
    .then((text) => {
      const cast = parseCast(text);
      term.resize(clamp(cast.header.width, 2, 1000), clamp(cast.header.height, 1, 500));
      let i = 0;
      let base = performance.now();
      let at = 0; // seconds into the recording at base
      const total = cast.duration.toFixed(1);
      const tick = () => {
        if (!r.paused) r.position = at + (performance.now() - base) / 1000 * r.speed;
        while (i < cast.events.length && cast.events[i].t <= r.position) {
          const ev = cast.events[i++];
          if (ev.code === 'o') term.write(ev.data);
          else if (sizeOf(ev.data)) term.resize(...sizeOf(ev.data));
        }
        if (i >= cast.events.length) {
          r.ended = true;
          show(`Replay ended (${total} s)`, 3000);
          return;
        }
        setTimeout(tick, r.paused ? 100 : clamp((cast.events[i].t - r.position) * 1000 / r.speed, 0, 100));
      };
      const rebase = () => { at = r.position; base = performance.now(); };
      term.attachCustomKeyEventHandler((e) => {
        if (e.type !== 'keydown') return false;
        if (e.key === ' ') { rebase(); r.paused = !r.paused; show(r.paused ? 'Paused' : `Playing ×${r.speed}`, 800); }
        if (e.key === 'ArrowRight') { r.position += 5; rebase(); }
        if (e.key === '+' || e.key === '-') { rebase(); r.speed = clamp(e.key === '+' ? r.speed * 2 : r.speed / 2, 0.1, 64); show(`×${r.speed}`, 800); }
        return false;
      });
      show(`Replay of ${id}: ${total} s at ×${r.speed}; Space pauses, → skips 5 s, + and - change speed`, 3000);
      tick();
    })
    .catch((err) => {
      r.error = String(err.message || err);
      r.ended = true;
      show('The recording does not play: ' + r.error);
    });
}

window.deskdTerm = { term, addons, search, get socket() { return ws; }, get session() { return session; } };
const castID = q.get('cast');
if (castID) {
  playCast(castID);
} else {
  new ResizeObserver(() => fit.fit()).observe(document.getElementById('term'));
  connect();
}
