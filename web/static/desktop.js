// deskd desktop page: noVNC core RFB against the relative "websockify" path.
import RFB from './vendor/novnc/core/rfb.js';

const q = new URLSearchParams(location.search);
const param = (name, def) => (q.has(name) ? q.get(name) : def);
const flag = (name, def) => {
  const v = param(name, def ? 'true' : 'false');
  return v === 'true' || v === '1' || v === 'yes';
};

const ui = {
  body: document.body,
  status: document.getElementById('status'),
  connect: document.getElementById('connect'),
  clipbtn: document.getElementById('clipbtn'),
  clip: document.getElementById('clip'),
  cliptext: document.getElementById('cliptext'),
  cad: document.getElementById('cad'),
  full: document.getElementById('full'),
  screen: document.getElementById('screen'),
};

// The WebSocket URL is computed from the page's own location, so it keeps
// whatever prefix the page was served under.
function wsURL() {
  const u = new URL(param('path', 'websockify'), location.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  u.hash = '';
  return u.href;
}

const resize = param('resize', 'scale');
const reconnect = flag('reconnect', true);
const reconnectDelay = Math.max(100, parseInt(param('reconnect_delay', '1000'), 10) || 1000);
let rfb = null;
let retry = null;
let attempts = 0;

function setState(state, text) {
  ui.body.dataset.state = state;
  ui.status.textContent = text;
}

function connect() {
  clearTimeout(retry);
  ui.connect.hidden = true;
  setState('connecting', 'Connecting…');
  const opts = { shared: flag('shared', true) };
  if (q.has('password')) opts.credentials = { password: q.get('password') };
  rfb = new RFB(ui.screen, wsURL(), opts);
  rfb.viewOnly = flag('view_only', false);
  rfb.scaleViewport = resize === 'scale';
  rfb.resizeSession = resize === 'remote';
  rfb.showDotCursor = flag('show_dot', false);
  rfb.qualityLevel = clamp(parseInt(param('quality', '6'), 10), 0, 9, 6);
  rfb.compressionLevel = clamp(parseInt(param('compression', '2'), 10), 0, 9, 2);
  rfb.focusOnClick = true;
  rfb.addEventListener('connect', () => {
    attempts = 0;
    setState('connected', 'Connected');
    rfb.focus();
  });
  rfb.addEventListener('disconnect', (e) => {
    rfb = null;
    if (e.detail.clean && !reconnect) {
      setState('disconnected', 'Disconnected');
      ui.connect.hidden = false;
      return;
    }
    if (!reconnect) {
      setState('failed', 'Connection failed');
      ui.connect.hidden = false;
      return;
    }
    attempts++;
    const delay = Math.min(reconnectDelay * 2 ** Math.min(attempts - 1, 5), 30000);
    setState('disconnected', `Disconnected; reconnecting in ${Math.round(delay / 1000)} s`);
    retry = setTimeout(connect, delay);
  });
  rfb.addEventListener('credentialsrequired', () => {
    const password = prompt('Password');
    if (password === null) { rfb.disconnect(); return; }
    rfb.sendCredentials({ password });
  });
  rfb.addEventListener('securityfailure', (e) => {
    setState('failed', 'Security failure: ' + (e.detail.reason || e.detail.status));
  });
  rfb.addEventListener('clipboard', (e) => { ui.cliptext.value = e.detail.text; });
  rfb.addEventListener('desktopname', (e) => { document.title = e.detail.name || 'Desktop'; });
}

function clamp(v, lo, hi, def) {
  return Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : def;
}

ui.connect.addEventListener('click', connect);
ui.clipbtn.addEventListener('click', () => { ui.clip.hidden = !ui.clip.hidden; });
ui.cliptext.addEventListener('input', () => { if (rfb) rfb.clipboardPasteFrom(ui.cliptext.value); });
ui.cad.addEventListener('click', () => { if (rfb) rfb.sendCtrlAltDel(); });
ui.full.addEventListener('click', () => {
  if (document.fullscreenElement) document.exitFullscreen();
  else document.documentElement.requestFullscreen().catch(() => {});
});

// Exposed for tests and embedding pages.
window.deskd = { get rfb() { return rfb; }, connect };

if (flag('autoconnect', true)) {
  connect();
} else {
  setState('disconnected', 'Ready');
  ui.connect.hidden = false;
}
