// Works in the desktop's tabs through deskd's CDP relay, as an agent
// would, for the tab-follow test: connectOverCDP, one step, disconnect.
//   node tabs.mjs <http endpoint> open         three tabs, tab1 tab2 tab3 (red, green, blue)
//   node tabs.mjs <http endpoint> act N        work in tabN (evaluate, click)
//   node tabs.mjs <http endpoint> popup        tab2 opens a popup (yellow) by a link
// Prints one line of JSON: {"ok": true, "pages": [titles]}.
import { chromium } from 'playwright-core';

const [endpoint, step, arg] = process.argv.slice(2);
const colors = { tab1: '#ff0000', tab2: '#00ff00', tab3: '#0000ff', popup: '#ffff00' };
const page = (title) => `data:text/html,<title>${title}</title><body style="margin:0;height:100vh;background:${encodeURIComponent(colors[title])}"></body>`;

const browser = await chromium.connectOverCDP(endpoint, { timeout: 60000 });
const context = browser.contexts()[0];
const byTitle = async (title) => {
  for (const p of context.pages()) if ((await p.title()) === title) return p;
  throw new Error(`no page ${title} among ${context.pages().length}`);
};
try {
  if (step === 'open') {
    for (const t of ['tab1', 'tab2', 'tab3']) {
      const p = await context.newPage();
      await p.goto(page(t));
    }
  } else if (step === 'act') {
    const p = await byTitle('tab' + arg);
    await p.evaluate(() => document.title);
    await p.mouse.click(50, 50);
  } else if (step === 'popup') {
    const p = await byTitle('tab2');
    // A page may not open a data: URL on its own: the popup is a blank
    // window the click fills in.
    await p.evaluate((color) => {
      const b = document.createElement('button');
      b.id = 'pop'; b.textContent = 'popup';
      b.style = 'position:fixed;left:10px;top:10px;font-size:40px';
      b.onclick = () => {
        const w = window.open('about:blank', '_blank');
        w.document.title = 'popup';
        w.document.body.style = 'margin:0;height:100vh;background:' + color;
      };
      document.body.append(b);
    }, colors.popup);
    const [popup] = await Promise.all([context.waitForEvent('page'), p.click('#pop')]);
    await popup.waitForLoadState();
  } else {
    throw new Error('usage: node tabs.mjs ENDPOINT open|act N|popup');
  }
  const titles = await Promise.all(context.pages().map((p) => p.title()));
  console.log(JSON.stringify({ ok: true, pages: titles }));
  await browser.close(); // over CDP: disconnects, the browser stays
  process.exit(0);
} catch (err) {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
}
