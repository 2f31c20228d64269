// Replay of a desktop recording (record/DesktopRecorder's format): each
// segment of the file is one RFB connection's server bytes, from its
// handshake on; noVNC's core RFB is fed them through a channel of ours
// instead of a WebSocket. Seeking starts a new RFB at the segment that
// holds the time (a full picture, fresh compression streams), feeds it
// everything up to the time as fast as it decodes, and only then shows
// it in place of the old one. The action logs of the same time are the
// markers. window.replay is the page's interface for scripts and tests.
import RFB from './vendor/novnc/core/rfb.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const status = (text) => { $('status').textContent = text; };

// Bounds of the format (record/desktop.go).
const MAGIC = 'DESKREC1';
const MAX_HEADER = 64 << 10;
const MAX_RECORD = 4 << 20;
const SEGMENT = 0x53;  // 'S': a segment (a connection) starts
const DATA = 0x44;     // 'D': the latest segment's bytes
const PREVIOUS = 0x50; // 'P': the previous segment's, in the overlap
const END = 0x45;      // 'E': the previous segment ended
const MAX_MARKERS = 10000;
// Feeding: at most this much unread in noVNC's queue (it grows to 40 MiB
// at most), and this long of work in one tick.
const MAX_QUEUED = 8 << 20;
const TICK_BUDGET_MS = 30;

// parse reads a recording: its header and segments, each the records
// it is made of (offsets into buf) and from when playback uses it: from
// the end of the segment before (the overlap, where that one's picture
// is exact and this one's may not be yet). A last record cut short (a
// crash while it was written) is left out.
export function parse(buf) {
  const u8 = new Uint8Array(buf);
  const dv = new DataView(buf);
  const text = new TextDecoder();
  if (u8.length < 12 || text.decode(u8.subarray(0, 8)) !== MAGIC) {
    throw new Error('not a deskd desktop recording');
  }
  const hn = dv.getUint32(8);
  if (hn > MAX_HEADER || 12 + hn > u8.length) throw new Error('damaged recording: its header');
  let header;
  try { header = JSON.parse(text.decode(u8.subarray(12, 12 + hn))); } catch { header = null; }
  if (!header || header.version !== 1) throw new Error('damaged recording: its header');
  const segs = [];
  let off = 12 + hn;
  let last = 0;
  while (off + 9 <= u8.length) {
    const type = u8[off];
    const ms = dv.getUint32(off + 1);
    const n = dv.getUint32(off + 5);
    const known = type === SEGMENT || type === DATA || type === PREVIOUS || type === END;
    if (!known || (segs.length === 0 && type !== SEGMENT) || ((type === PREVIOUS || type === END) && segs.length < 2) ||
        n > MAX_RECORD || ms < last) {
      throw new Error(`damaged recording at byte ${off}`);
    }
    if (off + 9 + n > u8.length) break;
    const rec = { ms, off: off + 9, n };
    if (type === SEGMENT) {
      // Used from the previous one's end: until an 'E' says when, never
      // (it went on to the end of the recording).
      segs.push({ start: ms, usable: segs.length === 0 ? 0 : Infinity, recs: [rec] });
    } else if (type === DATA) {
      segs[segs.length - 1].recs.push(rec);
    } else if (type === PREVIOUS) {
      segs[segs.length - 2].recs.push(rec);
    } else {
      segs[segs.length - 1].usable = Math.min(segs[segs.length - 1].usable, ms);
    }
    last = ms;
    off += 9 + n;
  }
  if (segs.length === 0) throw new Error('the recording is empty');
  // A segment whose predecessor never ended is never used; nor is one
  // used before the one before it.
  for (let i = 1; i < segs.length; i++) segs[i].usable = Math.max(segs[i].usable, segs[i - 1].usable);
  return { header, segs, duration: last, buf };
}

// A channel noVNC's Websock takes in place of a WebSocket: what noVNC
// sends goes nowhere, what the recording holds comes as messages.
class Channel {
  constructor() {
    this.binaryType = 'arraybuffer';
    this.protocol = 'binary';
    this.readyState = 'open';
    this.onopen = null;
    this.onmessage = null;
    this.onerror = null;
    this.onclose = null;
  }
  send() {}
  close() {
    if (this.readyState === 'closed') return;
    this.readyState = 'closed';
    setTimeout(() => this.onclose && this.onclose({ code: 1000, reason: '', wasClean: true }));
  }
}

const fmt = (ms) => {
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const mm = String(Math.floor(s / 60) % 60).padStart(h ? 2 : 1, '0');
  return (h ? h + ':' : '') + mm + ':' + String(s % 60).padStart(2, '0');
};

class Player {
  constructor(stage, rec) {
    this.stage = stage;
    this.rec = rec;
    this.view = null; // the RFB shown
    this.pend = null; // one being brought to the position, shown when it is there
    this.pos = 0;
    this.playing = false;
    this.speed = 1;
    this.baseAt = 0;
    this.basePos = 0;
    this.waiters = [];
    this.onprogress = () => {};
    this.timer = setInterval(() => this.tick(), 15);
  }

  segmentAt(ms) {
    const { segs } = this.rec;
    let lo = 0;
    let hi = segs.length - 1;
    while (lo < hi) { // the last segment in use at ms
      const mid = (lo + hi + 1) >> 1;
      if (segs[mid].usable <= ms) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  makeView(seg) {
    const div = document.createElement('div');
    div.className = 'pending';
    this.stage.append(div);
    const ch = new Channel();
    const rfb = new RFB(div, ch, { shared: true });
    rfb.viewOnly = true;
    rfb.focusOnClick = false;
    rfb.scaleViewport = true;
    rfb.addEventListener('disconnect', (e) => { if (!e.detail.clean && !view.dropped) status('This segment of the recording does not play: ' + (e.detail.reason || 'damaged')); });
    const view = { rfb, ch, div, seg, next: 0, fedMs: -1, dropped: false };
    return view;
  }

  drop(view) {
    if (!view) return;
    view.dropped = true;
    try { view.rfb.disconnect(); } catch { /* already gone */ }
    view.div.remove();
  }

  // feed gives view the records up to ms, within the tick's budget and
  // noVNC's queue; it says whether all of them went.
  feed(view, ms, deadline) {
    const { buf } = this.rec;
    const recs = this.rec.segs[view.seg].recs;
    while (view.next < recs.length && recs[view.next].ms <= ms) {
      if (view.rfb._flushing || view.rfb._sock.rQlen() > MAX_QUEUED || performance.now() > deadline) return false;
      const r = recs[view.next++];
      view.fedMs = r.ms;
      view.ch.onmessage({ data: buf.slice(r.off, r.off + r.n) });
      view.kicked = false;
    }
    // noVNC reads what came with the end of its handshake only at the
    // next message (it leaves its handshake loop once connected): an
    // empty message has it read the rest (a still screen sends no more).
    if (!view.kicked && view.rfb._sock.rQlen() > 0 && !view.rfb._flushing) {
      view.kicked = true;
      view.ch.onmessage({ data: new ArrayBuffer(0) });
    }
    return true;
  }

  // settled: what view was fed is drawn.
  settled(view) {
    return !view.rfb._flushing && !view.rfb._display.pending();
  }

  tick() {
    const now = performance.now();
    if (this.playing) {
      this.pos = Math.min(this.rec.duration, this.basePos + (now - this.baseAt) * this.speed);
      if (this.pos >= this.rec.duration) this.pause();
    }
    const deadline = now + TICK_BUDGET_MS;
    const want = this.segmentAt(this.pos);
    const v = this.view;
    if (v && v.seg === want && v.fedMs <= this.pos) {
      this.drop(this.pend);
      this.pend = null;
      const all = this.feed(v, this.pos, deadline);
      if (all && this.settled(v)) this.resolve();
    } else {
      if (!this.pend || this.pend.seg !== want || this.pend.fedMs > this.pos) {
        this.drop(this.pend);
        this.pend = this.makeView(want);
      }
      const p = this.pend;
      if (this.feed(p, this.pos, deadline) && this.settled(p)) {
        this.drop(this.view);
        this.view = p;
        this.pend = null;
        p.div.className = '';
        this.resolve();
      }
    }
    this.onprogress(this.pos);
  }

  resolve() {
    const w = this.waiters;
    this.waiters = [];
    w.forEach((f) => f());
  }

  // seek moves to ms; the promise resolves when the picture of ms is shown.
  seek(ms) {
    this.pos = Math.max(0, Math.min(this.rec.duration, ms));
    this.basePos = this.pos;
    this.baseAt = performance.now();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  play() {
    if (this.pos >= this.rec.duration) this.pos = 0;
    this.playing = true;
    this.basePos = this.pos;
    this.baseAt = performance.now();
  }

  pause() {
    this.playing = false;
  }

  setSpeed(s) {
    this.basePos = this.pos;
    this.baseAt = performance.now();
    this.speed = s;
  }

  canvas() {
    return this.view && this.view.div.querySelector('canvas');
  }
}

// hash is the SHA-256 of a canvas's pixels, in hex (tests compare the
// replay with the live viewer).
export async function hash(canvas) {
  const ctx = canvas.getContext('2d');
  const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  const d = await crypto.subtle.digest('SHA-256', px);
  return canvas.width + 'x' + canvas.height + ':' + Array.from(new Uint8Array(d), (b) => b.toString(16).padStart(2, '0')).join('');
}

// parseTime reads an RFC 3339 time with any number of fraction digits.
function parseTime(s) {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(s || '');
  if (!m) return NaN;
  return Date.parse(m[1] + m[3]) + (m[2] ? Number('0.' + m[2]) * 1000 : 0);
}

// label says what an action-log event is, in a few words.
function label(ev) {
  const str = (v) => (typeof v === 'string' ? v : '');
  switch (ev.kind) {
    case 'computer': {
      const a = Array.isArray(ev.actions) ? ev.actions.map((x) => str(x && x.action)).filter(Boolean).join(', ') : '';
      return `agent: ${a || 'computer'}${ev.ok === false ? ' (failed)' : ''}`;
    }
    case 'mcp': return `agent (MCP): ${str(ev.tool) || 'tool'}`;
    case 'cdp': return `agent (CDP): ${str(ev.method)}${ev.url ? ' ' + str(ev.url) : ''}`;
    case 'takeover': return `person: ${ev.phase === 'end' ? 'input ended' : 'input'}`;
    case 'file': return `file ${str(ev.op)}: ${str(ev.name)}`;
    case 'terminal': return 'terminal opened';
    default: return str(ev.kind);
  }
}

// listing is the list of recordings, asked for once: {status, list}
// (list null when it did not load).
function listing() {
  return fetch('record/', { cache: 'no-store' })
    .then(async (r) => {
      const body = r.ok ? await r.json() : null;
      return { status: r.status, list: body ? body.recordings || [] : null, mp4: !!(body && body.recording && body.recording.mp4) };
    })
    .catch(() => ({ status: 0, list: null, mp4: false }));
}

async function loadMarkers(listed, start, duration) {
  const { list } = await listed;
  if (!list) return [];
  const end = start + duration;
  const out = [];
  for (const info of list) {
    if (info.kind !== 'actions') continue;
    // Ids carry their start (second): a log that started after the end,
    // or was last written before the start, has nothing of ours.
    const m = /^actions-(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z-/.exec(info.id);
    const began = m ? Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]) : 0;
    if (began > end + 1000 || parseTime(info.modified) < start - 1000) continue;
    const lr = await fetch('record/' + encodeURIComponent(info.id), { cache: 'no-store' });
    if (!lr.ok) continue;
    for (const line of (await lr.text()).split('\n')) {
      if (!line || line.length > 65536 || out.length >= MAX_MARKERS) continue;
      let ev;
      try { ev = JSON.parse(line); } catch { continue; }
      if (!ev || typeof ev !== 'object' || ev.kind === 'start') continue;
      const ms = parseTime(ev.time) - start;
      if (!(ms >= 0 && ms <= duration)) continue;
      out.push({ ms, kind: ev.kind, label: label(ev), agent: ev.kind !== 'takeover' });
    }
  }
  return out.sort((a, b) => a.ms - b.ms);
}

async function listRecordings(listed, current) {
  const { status, list } = await listed;
  if (!list) {
    $('recordings').textContent = status === 403 ? 'This link may not list recordings.' : 'The recordings do not load (' + status + ').';
    return;
  }
  const ul = $('recordings');
  ul.replaceChildren();
  for (const info of list) {
    if (info.kind !== 'desktop') continue;
    const li = document.createElement('li');
    const a = document.createElement('a');
    a.href = 'replay.html?id=' + encodeURIComponent(info.id);
    a.textContent = info.id + (info.active ? ' (recording)' : '') + ' — ' + Math.round(info.size / 1024) + ' KiB';
    if (info.id === current) a.setAttribute('aria-current', 'page');
    li.append(a);
    ul.append(li);
  }
  if (!ul.children.length) ul.textContent = 'No desktop recordings.';
}

async function main() {
  const id = params.get('id');
  const listed = listing();
  listRecordings(listed, id);
  if (!id) {
    $('side').hidden = false;
    $('listbtn').setAttribute('aria-pressed', 'true');
    status('Pick a recording.');
    document.body.dataset.state = 'idle';
    return;
  }
  status('Loading ' + id + '…');
  const resp = await fetch('record/' + encodeURIComponent(id), { cache: 'no-store' });
  if (!resp.ok) throw new Error((await resp.text()).trim() || 'HTTP ' + resp.status);
  const rec = parse(await resp.arrayBuffer());
  const start = parseTime(rec.header.start);
  const player = new Player($('stage'), rec);
  const seekEl = $('seek');
  seekEl.max = String(rec.duration);
  seekEl.disabled = false;
  $('play').disabled = false;
  const mp4 = 'record/' + encodeURIComponent(id) + '/mp4';
  $('mp4').href = mp4;
  // Shown when the server can export (x264 installed); a link that may
  // not list recordings cannot tell, and tries.
  listed.then(({ list, mp4: can }) => { $('mp4').hidden = list !== null && !can; });
  const total = fmt(rec.duration);
  player.onprogress = (ms) => {
    $('clock').textContent = fmt(ms) + ' / ' + total;
    if (document.activeElement !== seekEl) seekEl.value = String(ms);
    $('play').textContent = player.playing ? 'Pause' : 'Play';
    $('play').setAttribute('aria-pressed', String(player.playing));
  };
  seekEl.addEventListener('input', () => player.seek(Number(seekEl.value)));
  $('play').addEventListener('click', () => (player.playing ? player.pause() : player.play()));
  $('speed').addEventListener('change', () => player.setSpeed(Number($('speed').value)));
  $('listbtn').addEventListener('click', () => {
    $('side').hidden = !$('side').hidden;
    $('listbtn').setAttribute('aria-pressed', String(!$('side').hidden));
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') { $('side').hidden = true; $('listbtn').setAttribute('aria-pressed', 'false'); }
    if (e.key === ' ' && e.target === document.body) { e.preventDefault(); $('play').click(); }
  });

  const markers = await loadMarkers(listed, start, rec.duration).catch(() => []);
  const marks = $('marks');
  const ol = $('markers');
  for (const m of markers) {
    const tick = document.createElement('span');
    tick.style.left = (100 * m.ms / Math.max(1, rec.duration)) + '%';
    tick.className = m.agent ? 'agent' : '';
    tick.title = fmt(m.ms) + ' ' + m.label;
    marks.append(tick);
    const li = document.createElement('li');
    li.tabIndex = 0;
    li.textContent = fmt(m.ms) + ' ' + m.label;
    const go = () => player.seek(m.ms);
    li.addEventListener('click', go);
    li.addEventListener('keydown', (e) => { if (e.key === 'Enter') go(); });
    ol.append(li);
  }
  if (!markers.length) ol.textContent = 'No actions were logged during this recording.';

  await player.seek(0);
  document.body.dataset.state = 'ready';
  status(id + ': ' + rec.segs.length + ' segments, ' + markers.length + ' markers');
  window.replay = {
    id, header: rec.header, duration: rec.duration, markers, mp4,
    segments: rec.segs.map((sg) => ({ start: sg.start, usable: Number.isFinite(sg.usable) ? sg.usable : null })),
    seek: (ms) => player.seek(ms),
    play: () => player.play(),
    pause: () => player.pause(),
    speed: (s) => player.setSpeed(s),
    position: () => player.pos,
    hash: () => hash(player.canvas()),
  };
  window.dispatchEvent(new Event('replayready'));
}

main().catch((e) => {
  document.body.dataset.state = 'failed';
  status('The recording does not play: ' + e.message);
});
