// Times: the server writes UTC into every <time>; show the viewer's own zone with UTC beside it.
(function () {
  "use strict";
  const pad = (n) => String(n).padStart(2, "0");
  function offset(date) {
    const minutes = -date.getTimezoneOffset();
    const sign = minutes >= 0 ? "+" : "-";
    return `UTC${sign}${pad(Math.floor(Math.abs(minutes) / 60))}:${pad(Math.abs(minutes) % 60)}`;
  }
  function local(date) {
    return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
      `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  }
  document.addEventListener("DOMContentLoaded", () => {
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    const now = new Date();
    for (const el of document.querySelectorAll("time[datetime]")) {
      const date = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(date.getTime())) continue;
      const utc = date.toISOString().slice(11, 19);
      el.title = el.textContent;
      el.textContent = `${local(date)} (${utc} UTC)`;
    }
    for (const el of document.querySelectorAll("[data-zone]")) {
      el.textContent = `Times in your zone, ${zone} (${offset(now)}), UTC in brackets`;
    }
    for (const el of document.querySelectorAll("[data-zone-name]")) {
      el.textContent = `${zone} (${offset(now)})`;
    }
  });
})();
