// app.js: the frame every page shares (navigation, admin token, the
// "refused" banner, the live indicator); then the component's page.
import { token, setToken, onAuth } from './api.js';

const component = document.body.dataset.component;
const banner = document.getElementById('banner');
const live = document.getElementById('live');
const input = document.getElementById('token');

input.value = token();
document.getElementById('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  setToken(input.value.trim());
  window.dispatchEvent(new Event('fulcrum:token'));
});

onAuth((refused) => {
  if (refused) {
    banner.hidden = false;
    banner.className = 'banner refused';
    banner.dataset.kind = 'refused';
    banner.textContent = token()
      ? 'The admin API refused the token (401). Check it and press "use".'
      : 'The admin API needs a token (401). Type it above and press "use".';
  } else if (banner.dataset.kind === 'refused') {
    banner.hidden = true;
    banner.dataset.kind = '';
  }
  if (!refused) {
    live.textContent = 'live ' + new Date().toLocaleTimeString();
    live.className = 'live ok';
  }
});

// showError is for failures other than 401: the server is down, an
// action was refused.
export function showError(msg) {
  banner.hidden = false;
  banner.className = 'banner error';
  banner.dataset.kind = 'error';
  banner.textContent = msg;
  live.className = 'live stale';
}
export function clearError() {
  if (banner.dataset.kind === 'error') { banner.hidden = true; banner.dataset.kind = ''; }
}

const pages = { gateway: './gateway.js', flow: './flow.js', supervisor: './supervisor.js' };
import(pages[component]).then((m) => m.start(document.getElementById('main')));
