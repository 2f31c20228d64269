// Drives Chromium through deskd's CDP relay the way agents do.
//   node agents.mjs playwright <http endpoint>   chromium.connectOverCDP
//   node agents.mjs puppeteer  <ws endpoint>     puppeteer.connect
// Prints one line of JSON: {"value", "png" (bytes), "sig" (first 4 bytes)}.
import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';

const [mode, endpoint] = process.argv.slice(2);
const html = 'data:text/html,<title>agent</title><h1 id="h">hello</h1>';
const probe = () => document.getElementById('h').textContent + ':' + 6 * 7;

async function playwright() {
  const browser = await chromium.connectOverCDP(endpoint, { timeout: 60000 });
  const context = browser.contexts()[0] ?? (await browser.newContext());
  const page = await context.newPage();
  await page.goto(html);
  const value = await page.evaluate(probe);
  const png = await page.screenshot();
  await page.close();
  await browser.close(); // over CDP: disconnects, the browser stays
  return { value, png };
}

async function puppeteerRun() {
  const browser = await puppeteer.connect({ browserWSEndpoint: endpoint, protocolTimeout: 60000 });
  const page = await browser.newPage();
  await page.goto(html);
  const value = await page.evaluate(probe);
  const png = Buffer.from(await page.screenshot());
  await page.close();
  await browser.disconnect();
  return { value, png };
}

const run = { playwright, puppeteer: puppeteerRun }[mode];
if (!run) {
  console.error('usage: node agents.mjs playwright|puppeteer ENDPOINT');
  process.exit(2);
}
run().then(
  ({ value, png }) => {
    console.log(JSON.stringify({ value, png: png.length, sig: [...png.subarray(0, 4)] }));
    process.exit(0);
  },
  (err) => {
    console.error(err && err.stack ? err.stack : String(err));
    process.exit(1);
  },
);
