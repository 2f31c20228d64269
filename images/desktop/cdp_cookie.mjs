// Sets or reads a persistent cookie in the desktop's Chromium through the
// panel (test_ctl.sh's persistence check), over CDP with puppeteer-core.
//   node cdp_cookie.mjs set|get <ws cdp url>
// get prints the cookie's value, or nothing.
import puppeteer from 'puppeteer-core';

const [op, endpoint] = process.argv.slice(2);
const browser = await puppeteer.connect({ browserWSEndpoint: endpoint, protocolTimeout: 60000 });
const s = await browser.target().createCDPSession();
if (op === 'set') {
  await s.send('Storage.setCookies', {
    cookies: [{ name: 'persist', value: 'kept-42', domain: 'example.test', path: '/', expires: Math.floor(Date.now() / 1000) + 86400 }],
  });
} else {
  const { cookies } = await s.send('Storage.getCookies');
  const c = cookies.find((c) => c.name === 'persist' && c.domain === 'example.test');
  console.log(c ? c.value : '');
}
await browser.disconnect();
process.exit(0);
