// deskd desktop page: noVNC core RFB against the relative "websockify" path,
// with a toolbar (state, reconnect, extra keys, clipboard, files, DevTools, settings,
// view only, full screen), the clipboard (explicit, or automatic when the
// person turns it on) and file transfer.
import RFB from './vendor/novnc/core/rfb.js';
import KeyTable from './vendor/novnc/core/input/keysym.js';
import keysyms from './vendor/novnc/core/input/keysymdef.js';

const q = new URLSearchParams(location.search);
const param = (name, def) => (q.has(name) ? q.get(name) : def);
const flag = (name, def) => {
  const v = param(name, def ? 'true' : 'false');
  return v === 'true' || v === '1' || v === 'yes';
};
const $ = (id) => document.getElementById(id);

const ui = {
  body: document.body, status: $('status'), connect: $('connect'), badge: $('viewbadge'),
  keysbtn: $('keysbtn'), keys: $('keys'), kbdbtn: $('kbdbtn'), kbd: $('kbd'),
  clipbtn: $('clipbtn'), clip: $('clip'), cliptext: $('cliptext'), clipnote: $('clipnote'),
  clipsend: $('clipsend'), clipcopy: $('clipcopy'), autoclip: $('autoclip'),
  filesbtn: $('filesbtn'), files: $('files'), filelist: $('filelist'), filenote: $('filenote'),
  upload: $('upload'), refresh: $('refresh'), picker: $('picker'), drop: $('drop'),
  followbtn: $('followbtn'), devbtn: $('devbtn'), devtools: $('devtools'), devlist: $('devlist'), devnote: $('devnote'), devrefresh: $('devrefresh'),
  setbtn: $('setbtn'), settings: $('settings'), resize: $('resize'), hidpi: $('hidpi'),
  quality: $('quality'), qualityout: $('qualityout'), compression: $('compression'), compressionout: $('compressionout'),
  viewonly: $('viewonly'), full: $('full'), cad: $('cad'), screen: $('screen'),
};

// Settings: the URL's parameters first, then what this browser chose last.
const store = (() => { try { return window.localStorage; } catch { return null; } })();
const saved = (name, def) => (q.has(name) ? q.get(name) : (store?.getItem('deskd.' + name) ?? def));
const save = (name, v) => { try { store?.setItem('deskd.' + name, String(v)); } catch { /* private mode */ } };
function clamp(v, lo, hi, def) {
  return Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : def;
}
const settings = {
  resize: ['scale', 'remote', 'off'].includes(saved('resize', 'scale')) ? saved('resize', 'scale') : 'scale',
  hidpi: ['1', 'true'].includes(String(saved('hidpi', '0'))),
  quality: clamp(parseInt(saved('quality', '6'), 10), 0, 9, 6),
  compression: clamp(parseInt(saved('compression', '2'), 10), 0, 9, 2),
  // Automatic clipboard is off unless the person turns it on: on, the
  // browser's clipboard (often a password) goes to the desktop at every
  // focus, and whatever a page on the desktop copies lands in the
  // person's clipboard (pastejacking).
  autoclip: saved('clipboard', 'manual') === 'auto',
};

// The session's scope: a view token gets a badge and no input at all.
let readOnly = flag('view_only', false);
let tokenReadOnly = false;
let maxUpload = 0;

function wsURL() {
  const u = new URL(param('path', 'websockify'), location.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  u.hash = '';
  return u.href;
}

const reconnect = flag('reconnect', true);
const reconnectDelay = Math.max(100, parseInt(param('reconnect_delay', '1000'), 10) || 1000);
let rfb = null;
let retry = null;
let attempts = 0;

// The last state changes, for tests and for whoever debugs a connection.
const history = [];
function setState(state, text) {
  ui.body.dataset.state = state;
  ui.status.textContent = text;
  history.push(`${new Date().toISOString()} ${state}: ${text}`);
  if (history.length > 50) history.shift();
}

function applySettings() {
  ui.resize.value = settings.resize;
  ui.hidpi.checked = settings.hidpi;
  ui.autoclip.checked = settings.autoclip;
  ui.quality.value = ui.qualityout.value = settings.quality;
  ui.compression.value = ui.compressionout.value = settings.compression;
  if (!rfb) return;
  rfb.scaleViewport = settings.resize !== 'off';
  rfb.clipViewport = settings.resize === 'off';
  rfb.resizeSession = settings.resize === 'remote' && !readOnly;
  rfb.qualityLevel = settings.quality;
  rfb.compressionLevel = settings.compression;
}

// HiDPI: in "resize the desktop" mode the remote size is the window's in
// device pixels, and noVNC scales the canvas down to CSS pixels, so text
// is as sharp as the screen can show it. noVNC (pinned 1.7.0) asks its
// private _screenSize() for the size to request; it is scaled for that
// call only, its scaling maths keep CSS pixels.
function hidpiResize(r) {
  const request = r._requestRemoteResize;
  r._requestRemoteResize = function () {
    const own = this._screenSize;
    const d = settings.hidpi ? (window.devicePixelRatio || 1) : 1;
    this._screenSize = () => { const s = own.call(this); return { w: Math.floor(s.w * d), h: Math.floor(s.h * d) }; };
    try { request.call(this); } finally { delete this._screenSize; }
  };
}

function connect() {
  clearTimeout(retry);
  ui.connect.hidden = true;
  setState('connecting', attempts ? `Reconnecting (attempt ${attempts + 1})…` : 'Connecting…');
  const opts = { shared: flag('shared', true) };
  if (q.has('password')) opts.credentials = { password: q.get('password') };
  rfb = new RFB(ui.screen, wsURL(), opts);
  hidpiResize(rfb);
  rfb.viewOnly = readOnly;
  rfb.showDotCursor = flag('show_dot', false);
  rfb.focusOnClick = true;
  textInput(rfb);
  applySettings();
  rfb.addEventListener('connect', () => {
    attempts = 0;
    setState('connected', tokenReadOnly ? 'Connected (view only)' : 'Connected');
    if (!readOnly) rfb.focus();
    autoPaste();
  });
  rfb.addEventListener('disconnect', (e) => {
    rfb = null;
    releaseModifiers(false);
    if (!reconnect) {
      setState(e.detail.clean ? 'disconnected' : 'failed', e.detail.clean ? 'Disconnected' : 'Connection failed');
      ui.connect.hidden = false;
      return;
    }
    attempts++;
    const delay = Math.min(reconnectDelay * 2 ** Math.min(attempts - 1, 5), 30000);
    setState('disconnected', `Disconnected; reconnecting in ${Math.round(delay / 1000)} s`);
    ui.connect.hidden = false;
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
  rfb.addEventListener('clipboard', (e) => remoteClipboard(e.detail.text));
  rfb.addEventListener('desktopname', (e) => { document.title = e.detail.name || 'Desktop'; });
}

// ---- panels: one open at a time; Escape closes it ----
const panels = [[ui.keysbtn, ui.keys], [ui.clipbtn, ui.clip], [ui.filesbtn, ui.files], [ui.devbtn, ui.devtools], [ui.setbtn, ui.settings]];
function toggle(btn, panel, open = panel.hidden) {
  for (const [b, p] of panels) {
    if (p !== panel && p !== ui.keys && panel !== ui.keys) { p.hidden = true; b.setAttribute('aria-pressed', 'false'); }
  }
  panel.hidden = !open;
  btn.setAttribute('aria-pressed', String(open));
  ui.body.classList.toggle('pinned', panels.some(([, p]) => !p.hidden));
  if (panel === ui.files && open) listFiles();
  if (panel === ui.devtools && open) listTabs();
}
for (const [b, p] of panels) b.addEventListener('click', () => toggle(b, p));
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape' || e.target === ui.screen || ui.screen.contains(e.target)) return;
  for (const [b, p] of panels) if (!p.hidden && p !== ui.keys) { toggle(b, p, false); b.focus(); }
});

// ---- extra keys: sticky modifiers, keys, Ctrl+Alt+Del ----
const MODS = {
  ctrl: [KeyTable.XK_Control_L, 'ControlLeft'],
  alt: [KeyTable.XK_Alt_L, 'AltLeft'],
  super: [KeyTable.XK_Super_L, 'MetaLeft'],
};
const KEYS = {
  Tab: [KeyTable.XK_Tab, 'Tab'], Escape: [KeyTable.XK_Escape, 'Escape'],
  Left: [KeyTable.XK_Left, 'ArrowLeft'], Up: [KeyTable.XK_Up, 'ArrowUp'],
  Down: [KeyTable.XK_Down, 'ArrowDown'], Right: [KeyTable.XK_Right, 'ArrowRight'],
};
const held = new Set();
function setModifier(name, down) {
  const btn = ui.keys.querySelector(`[data-mod="${name}"]`);
  if (down === held.has(name)) return;
  if (down) held.add(name); else held.delete(name);
  btn.setAttribute('aria-pressed', String(down));
  if (rfb && !readOnly) rfb.sendKey(MODS[name][0], MODS[name][1], down);
}
// A sticky modifier applies to the next key, then lets go.
function releaseModifiers(send = true) {
  for (const name of [...held]) {
    if (send) setModifier(name, false);
    else { held.delete(name); ui.keys.querySelector(`[data-mod="${name}"]`).setAttribute('aria-pressed', 'false'); }
  }
}
function tap(keysym, code) {
  if (!rfb || readOnly) return;
  rfb.sendKey(keysym, code);
  releaseModifiers();
}
ui.keys.addEventListener('click', (e) => {
  const b = e.target.closest('button');
  if (!b || !rfb || readOnly) return;
  if (b.dataset.mod) setModifier(b.dataset.mod, !held.has(b.dataset.mod));
  else if (b.dataset.key) tap(...KEYS[b.dataset.key]);
  else if (b === ui.cad) { rfb.sendCtrlAltDel(); releaseModifiers(); }
});
// Keys from the physical keyboard also end a sticky modifier.
document.addEventListener('keyup', (e) => {
  if (held.size && !['Control', 'Alt', 'Meta', 'Shift'].includes(e.key)) releaseModifiers();
}, true);

// ---- text input: IME and the on-screen keyboard ----
// A canvas cannot hold an input method's composition, so the desktop's
// keyboard focus is a text field (#kbd) instead: noVNC's key handling
// listens there (pinned noVNC 1.7.0: its Keyboard's private _target), and
// keys go out as keysyms as before, each stopped before it reaches the
// field. What an input method composes (Chinese, Japanese, Korean; a
// phone's keyboard) is shown in the field, at the pointer, while it is
// composed; once committed it goes out as text (Unicode keysyms through
// deskd's spare keycodes, or the clipboard for long text), never as the
// Latin keys the input method consumed.
const ime = ui.kbd;
let composing = false;
let pointerAt = { x: 16, y: 16 };
let touched = false; // the last pointer was a finger
ui.screen.addEventListener('pointermove', (e) => { pointerAt = { x: e.clientX, y: e.clientY }; }, { passive: true });
ui.screen.addEventListener('pointerdown', (e) => { touched = e.pointerType === 'touch'; pointerAt = { x: e.clientX, y: e.clientY }; }, { passive: true, capture: true });
function textInput(r) {
  r._keyboard._target = ime; // grabbed when the connection is up
  // A click on the desktop gives it the keyboard; a finger does not (it
  // would bring up a phone's keyboard at every tap: the ⌨ button does).
  r.focus = (o) => { if (!touched) ime.focus(o); };
  r.blur = () => ime.blur();
}
// Past this many characters, committed text goes through the clipboard.
const MAX_KEYED = 256;
function sendText(text) {
  if (!rfb || readOnly || !text) return;
  if ([...text].length > MAX_KEYED) {
    rfb.clipboardPasteFrom(text);
    rfb.sendKey(KeyTable.XK_Control_L, 'ControlLeft', true);
    rfb.sendKey(KeyTable.XK_v, 'KeyV');
    rfb.sendKey(KeyTable.XK_Control_L, 'ControlLeft', false);
    return;
  }
  for (const ch of text) {
    if (ch === '\n' || ch === '\r') tap(KeyTable.XK_Return, 'Enter');
    else if (ch === '\t') tap(KeyTable.XK_Tab, 'Tab');
    else tap(keysyms.lookup(ch.codePointAt(0)));
  }
}
function commit() {
  const text = ime.value;
  ime.value = '';
  sendText(text);
}
function placeComposition(x, y, at) {
  ime.style.left = Math.max(0, Math.min(x, window.innerWidth - 40)) + 'px';
  ime.style.top = Math.max(0, Math.min(y, window.innerHeight - 40)) + 'px';
  ime.dataset.at = at;
}
function showComposition(on) {
  ime.classList.toggle('composing', on);
  if (on) placeComposition(pointerAt.x + 4, pointerAt.y + 4, 'pointer');
  else ime.style.width = '';
}
// Where the desktop's text caret is, in page pixels, from the
// accessibility snapshot (the focused field's caret); null when the
// desktop cannot say (no accessibility, no field focused).
let caretAsked = null;
function remoteCaret() {
  if (caretAsked) return caretAsked;
  caretAsked = (async () => {
    try {
      const r = await fetch('computer/a11y?interactive=1&max_nodes=2000&timeout_ms=1500', { cache: 'no-store' });
      if (!r.ok) return null;
      const l = await r.json();
      const e = (l.elements || []).find((x) => x.caret);
      const canvas = ui.screen.querySelector('canvas');
      if (!e || !canvas || !canvas.width) return null;
      const b = canvas.getBoundingClientRect();
      const s = (l.geometry && l.geometry.scale) || 1; // snapshot pixels per screen pixel
      const [x, y, , h] = e.caret;
      return { x: b.left + (x / s) * (b.width / canvas.width), y: b.top + ((y + h) / s) * (b.height / canvas.height) };
    } catch {
      return null;
    } finally {
      caretAsked = null;
    }
  })();
  return caretAsked;
}
ime.addEventListener('compositionstart', () => {
  composing = true;
  showComposition(true);
  // Under the remote caret once known: the input method's own window
  // follows the field.
  remoteCaret().then((p) => { if (p && composing) placeComposition(p.x, p.y + 2, 'caret'); });
});
ime.addEventListener('compositionupdate', (e) => { ime.style.width = Math.max(2, [...(e.data || '')].length + 1) + 'em'; });
ime.addEventListener('compositionend', () => {
  composing = false;
  showComposition(false);
  commit();
});
ime.addEventListener('input', (e) => {
  if (composing || e.isComposing) return; // shown, not sent, until committed
  if (!rfb || readOnly) { ime.value = ''; return; }
  if (e.inputType === 'deleteContentBackward') { ime.value = ''; tap(KeyTable.XK_BackSpace, 'Backspace'); return; }
  if (e.inputType === 'insertLineBreak') { ime.value = ''; tap(KeyTable.XK_Return, 'Enter'); return; }
  commit();
});
// Keys an input method takes (keyCode 229, key "Process") are its own:
// noVNC must neither send them nor cancel them. Seen first, here.
for (const type of ['keydown', 'keyup']) {
  document.addEventListener(type, (e) => {
    if (e.target === ime && (composing || e.isComposing || e.keyCode === 229)) e.stopPropagation();
  }, true);
}
ui.kbdbtn.addEventListener('click', () => {
  if (readOnly) return;
  touched = false;
  ime.focus();
});

// ---- clipboard: explicit by default; automatic when turned on and the browser allows ----
let lastLocal = null;   // last text sent to the desktop
let lastRemote = null;  // last text the desktop sent
const autoClipboard = () => settings.autoclip && !!(navigator.clipboard && window.isSecureContext);
function clipNote(text) { ui.clipnote.textContent = text; }
function sendClipboard(text, force) {
  if (!rfb || readOnly || (!force && (text === lastLocal || text === lastRemote))) return false;
  lastLocal = text;
  rfb.clipboardPasteFrom(text);
  return true;
}
// "Send to desktop": the browser's clipboard when it lets us read it,
// else what is in the box.
ui.clipsend.addEventListener('click', async () => {
  let text = ui.cliptext.value;
  try {
    if (navigator.clipboard?.readText) text = (await navigator.clipboard.readText()) || text;
  } catch { /* not allowed: the box it is */ }
  ui.cliptext.value = text;
  clipNote(sendClipboard(text, true) ? 'Sent to the desktop.' : 'Not connected, or view only: nothing sent.');
});
// "Copy from desktop": what the desktop copied last, into the browser's
// clipboard.
ui.clipcopy.addEventListener('click', async () => {
  const text = lastRemote ?? ui.cliptext.value;
  try {
    await navigator.clipboard.writeText(text);
    lastLocal = text;
    clipNote('Copied to this browser\'s clipboard.');
  } catch {
    ui.cliptext.value = text;
    ui.cliptext.select();
    clipNote(document.execCommand?.('copy') ? 'Copied to this browser\'s clipboard.' : 'The browser did not let it through: copy it from this box.');
  }
});
// With automatic clipboard on: when the page gets focus (the user comes
// back from another window), the local clipboard goes to the desktop.
async function autoPaste() {
  if (!autoClipboard() || !document.hasFocus() || !navigator.clipboard.readText) return;
  try {
    const text = await navigator.clipboard.readText();
    if (text) { sendClipboard(text); ui.cliptext.value = text; }
    clipNote('Clipboard is shared with this browser automatically.');
  } catch {
    clipNote('The browser does not share its clipboard here: use this box.');
  }
}
async function remoteClipboard(text) {
  lastRemote = text;
  ui.cliptext.value = text;
  if (!autoClipboard()) {
    clipNote('The desktop copied text: "Copy from desktop" puts it on this browser\'s clipboard.');
    return;
  }
  if (!document.hasFocus()) return;
  try {
    await navigator.clipboard.writeText(text);
    lastLocal = text;
    clipNote('Clipboard is shared with this browser automatically.');
  } catch {
    clipNote('The desktop\'s clipboard is in this box; the browser did not let it through.');
  }
}
window.addEventListener('focus', autoPaste);
document.addEventListener('paste', (e) => {
  const text = e.clipboardData?.getData('text/plain');
  if (text && e.target !== ui.cliptext) sendClipboard(text);
});
ui.cliptext.addEventListener('input', () => { if (rfb && !readOnly) { lastLocal = ui.cliptext.value; rfb.clipboardPasteFrom(ui.cliptext.value); } });

// ---- files: ~/Downloads, upload by picking or dropping ----
const DIR = 'Downloads/';
const fileURL = (name) => 'files/' + DIR + encodeURIComponent(name);
function human(n) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  for (; n >= 1024 && i < u.length - 1; i++) n /= 1024;
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}
async function listFiles() {
  ui.filenote.textContent = tokenReadOnly ? 'View only: downloads, no uploads.' : 'Drop files anywhere on the page to upload them.';
  let entries = [];
  try {
    const r = await fetch('files/' + DIR, { cache: 'no-store' });
    if (r.ok) entries = (await r.json()).entries;
    else if (r.status !== 404) throw new Error((await r.json()).error || r.statusText);
  } catch (err) {
    ui.filenote.textContent = 'Could not list files: ' + err.message;
  }
  ui.filelist.replaceChildren(...entries.filter((e) => e.type === 'file').sort((a, b) => b.mtime.localeCompare(a.mtime)).map((e) => {
    const li = document.createElement('li');
    const a = document.createElement('a');
    a.href = fileURL(e.name);
    a.download = e.name;
    a.textContent = e.name;
    const size = document.createElement('span');
    size.className = 'size';
    size.textContent = human(e.size);
    li.append(a, size);
    return li;
  }));
  if (!entries.length) ui.filelist.innerHTML = '<li class="empty">No files yet</li>';
}
// One upload: PUT with progress; a name already taken gets " (n)".
function put(file, name, row) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('PUT', fileURL(name));
    x.setRequestHeader('If-None-Match', '*');
    x.setRequestHeader('Content-Type', 'application/octet-stream');
    x.upload.onprogress = (e) => { if (e.lengthComputable) row.value = e.loaded / e.total; };
    x.onload = () => resolve(x);
    x.onerror = () => reject(new Error('network error'));
    x.send(file);
  });
}
async function uploadFiles(list) {
  if (tokenReadOnly) return;
  if (ui.files.hidden) toggle(ui.filesbtn, ui.files, true);
  for (const file of list) {
    if (maxUpload && file.size > maxUpload) {
      ui.filenote.textContent = `${file.name}: ${human(file.size)} is over the limit of ${human(maxUpload)}`;
      continue;
    }
    const li = document.createElement('li');
    const bar = document.createElement('progress');
    bar.max = 1;
    bar.value = 0;
    li.append(file.name + ' ', bar);
    ui.filelist.prepend(li);
    const dot = file.name.lastIndexOf('.');
    const stem = dot > 0 ? file.name.slice(0, dot) : file.name;
    const ext = dot > 0 ? file.name.slice(dot) : '';
    try {
      for (let n = 0; n < 100; n++) {
        const x = await put(file, n ? `${stem} (${n})${ext}` : file.name, bar);
        if (x.status === 412) continue;
        if (x.status !== 201) throw new Error(JSON.parse(x.responseText || '{}').error || x.statusText);
        ui.filenote.textContent = `Uploaded ${file.name} (${human(file.size)})`;
        break;
      }
    } catch (err) {
      ui.filenote.textContent = `${file.name}: ${err.message}`;
    }
  }
  listFiles();
}
ui.upload.addEventListener('click', () => ui.picker.click());
ui.refresh.addEventListener('click', listFiles);
ui.picker.addEventListener('change', () => { uploadFiles([...ui.picker.files]); ui.picker.value = ''; });
let dragDepth = 0;
document.addEventListener('dragenter', (e) => {
  if (tokenReadOnly || !e.dataTransfer?.types.includes('Files')) return;
  dragDepth++;
  ui.drop.hidden = false;
});
document.addEventListener('dragleave', () => { if (--dragDepth <= 0) { dragDepth = 0; ui.drop.hidden = true; } });
document.addEventListener('dragover', (e) => { if (e.dataTransfer?.types.includes('Files')) e.preventDefault(); });
document.addEventListener('drop', (e) => {
  if (!e.dataTransfer?.files.length) return;
  e.preventDefault();
  dragDepth = 0;
  ui.drop.hidden = true;
  uploadFiles([...e.dataTransfer.files]);
});

// ---- settings ----
ui.autoclip.addEventListener('change', () => {
  settings.autoclip = ui.autoclip.checked;
  save('clipboard', settings.autoclip ? 'auto' : 'manual');
  clipNote(settings.autoclip ? 'The clipboard is shared with this browser automatically.' : 'Use "Send to desktop" and "Copy from desktop".');
  if (settings.autoclip) autoPaste();
});
ui.resize.addEventListener('change', () => { settings.resize = ui.resize.value; save('resize', settings.resize); applySettings(); });
ui.hidpi.addEventListener('change', () => {
  settings.hidpi = ui.hidpi.checked;
  save('hidpi', settings.hidpi ? 1 : 0);
  if (rfb && settings.resize === 'remote') { rfb.resizeSession = false; applySettings(); }
});
for (const k of ['quality', 'compression']) {
  ui[k].addEventListener('input', () => {
    settings[k] = parseInt(ui[k].value, 10);
    ui[k + 'out'].value = settings[k];
    save(k, settings[k]);
    applySettings();
  });
}
window.matchMedia?.(`(resolution: ${window.devicePixelRatio}dppx)`).addEventListener?.('change', () => {
  if (rfb && settings.resize === 'remote' && settings.hidpi) { rfb.resizeSession = false; applySettings(); }
});

// ---- DevTools: the desktop browser's tabs, each opening its inspector ----
// (full tokens only: the relay serves Chromium's own DevTools frontend,
// whose URL discovery gives under this panel)
async function listTabs() {
  ui.devnote.textContent = "Opens Chromium's DevTools for a tab, in a new tab of this browser.";
  let tabs = [];
  try {
    const r = await fetch('cdp/json/list', { cache: 'no-store' });
    if (!r.ok) throw new Error((await r.text()).trim() || r.statusText);
    tabs = (await r.json()).filter((t) => t.type === 'page' && t.devtoolsFrontendUrl);
  } catch (err) {
    ui.devnote.textContent = 'Could not list the tabs: ' + err.message;
  }
  ui.devlist.replaceChildren(...tabs.map((t) => {
    const li = document.createElement('li');
    const a = document.createElement('a');
    a.href = t.devtoolsFrontendUrl;
    a.target = '_blank';
    a.rel = 'noopener';
    a.textContent = t.title || t.url;
    a.title = t.url;
    li.append(a);
    return li;
  }));
  if (!tabs.length) ui.devlist.innerHTML = '<li class="empty">No tabs</li>';
}
ui.devrefresh.addEventListener('click', listTabs);

// ---- tab-follow: shown (full tokens) while it is on; the button pauses it ----
function showFollow(st) {
  ui.followbtn.hidden = !st.on;
  ui.followbtn.setAttribute('aria-pressed', String(!!st.paused));
  ui.followbtn.textContent = st.paused ? 'Follow paused' : 'Following the agent';
  ui.followbtn.title = st.paused ? 'Tab-follow is paused: press to follow the agent again'
    : 'The desktop shows the browser tab the agent works in' + (st.tab ? ' (now: ' + (st.tab.title || st.tab.url || st.tab.id) + ')' : '') + '; press to pause';
}
async function followState(paused) {
  try {
    const r = paused === undefined ? await fetch('api/follow', { cache: 'no-store' })
      : await fetch('api/follow', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ paused }) });
    if (r.ok) showFollow(await r.json());
  } catch { /* shown as it was */ }
}
ui.followbtn.addEventListener('click', () => followState(ui.followbtn.getAttribute('aria-pressed') !== 'true'));

// ---- view only, full screen, reconnect ----
function setReadOnly(v) {
  readOnly = v || tokenReadOnly;
  ui.viewonly.setAttribute('aria-pressed', String(readOnly));
  ui.body.classList.toggle('readonly', readOnly);
  if (readOnly) releaseModifiers();
  if (rfb) { rfb.viewOnly = readOnly; applySettings(); }
}
ui.viewonly.addEventListener('click', () => { if (!tokenReadOnly) setReadOnly(!readOnly); });
ui.full.addEventListener('click', () => {
  if (document.fullscreenElement) document.exitFullscreen();
  else document.documentElement.requestFullscreen().catch((err) => setState(ui.body.dataset.state, 'Full screen refused: ' + err.message));
});
document.addEventListener('fullscreenchange', () => ui.full.setAttribute('aria-pressed', String(!!document.fullscreenElement)));
ui.connect.addEventListener('click', () => { attempts = 0; if (rfb) rfb.disconnect(); else connect(); });

// Exposed for tests and embedding pages.
window.deskd = {
  get rfb() { return rfb; }, connect, settings, get readOnly() { return readOnly; },
  get autoClipboard() { return autoClipboard(); }, held, uploadFiles, listFiles, listTabs, followState, history,
};

// What the token allows decides the badge before anything connects.
(async () => {
  try {
    const r = await fetch('api/panel', { cache: 'no-store' });
    if (r.ok) {
      const p = await r.json();
      tokenReadOnly = !!p.read_only;
      maxUpload = p.max_upload || 0;
      ui.filesbtn.hidden = !p.files;
    }
  } catch { /* an older deskd: assume what the URL says */ }
  ui.badge.hidden = !tokenReadOnly;
  ui.devbtn.hidden = tokenReadOnly;
  if (!tokenReadOnly) {
    followState();
    setInterval(() => { if (!document.hidden) followState(); }, 5000);
  }
  ui.viewonly.hidden = tokenReadOnly;
  ui.body.classList.toggle('tokenview', tokenReadOnly);
  setReadOnly(readOnly);
  applySettings();
  if (flag('autoconnect', true)) {
    connect();
  } else {
    setState('disconnected', 'Ready');
    ui.connect.textContent = 'Connect';
    ui.connect.hidden = false;
  }
})();
