// Browser notifications for a watched session that needs its viewer: a
// permission or input request that arrives while the person is not
// looking at the page. Only once they allowed them (askToNotify, from a
// click: browsers ask for permission only on a gesture).

export function canAskToNotify() {
  return 'Notification' in window && Notification.permission === 'default';
}

export async function askToNotify() {
  if (!('Notification' in window)) return 'denied';
  return Notification.requestPermission();
}

// notifyNeeded tells the person that session id (titled title) waits on
// them for what, unless they are looking at it already. Its tag makes a
// second request of the same session replace the first notification;
// clicking one shows the session.
export function notifyNeeded(id, title, what) {
  if (!('Notification' in window) || Notification.permission !== 'granted') return;
  if (document.visibilityState === 'visible' && document.hasFocus()) return;
  const n = new Notification('Skein: ' + (title || id) + ' needs you', { body: what, tag: 'skein-' + id });
  n.onclick = () => {
    focus();
    location.hash = '#/s/' + encodeURIComponent(id);
    n.close();
  };
}
