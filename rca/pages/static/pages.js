// Times: the server writes UTC into every <time>; show each in the viewer's own zone, 24-hour,
// with the UTC time on hover, and name the zone once, in the footer.
(function () {
  "use strict";
  const pad = (n) => String(n).padStart(2, "0");
  function offset(date) {
    const minutes = -date.getTimezoneOffset();
    const sign = minutes >= 0 ? "+" : "-";
    return `${sign}${pad(Math.floor(Math.abs(minutes) / 60))}:${pad(Math.abs(minutes) % 60)}`;
  }
  const day = (date) => `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
  const clock = (date) => `${pad(date.getHours())}:${pad(date.getMinutes())}`;
  const local = (date) => `${day(date)} ${clock(date)}:${pad(date.getSeconds())}`;
  const utc = (date) => `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
  // Shared with charts.js: one way of writing a time on the page.
  window.rcaTime = { day, clock, local, utc };
  document.addEventListener("DOMContentLoaded", () => {
    const now = new Date();
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "your zone";
    const inUtc = now.getTimezoneOffset() === 0 && /^(UTC|Etc\/(UTC|GMT|Universal|Zulu)|GMT|Universal|Zulu)$/.test(zone);
    for (const el of document.querySelectorAll("time[datetime]")) {
      const date = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(date.getTime())) continue;
      el.title = utc(date);
      el.textContent = el.hasAttribute("data-clock") ? clock(date) : local(date);
    }
    for (const el of document.querySelectorAll("[data-zone]")) {
      el.textContent = inUtc ? "Times in UTC" : `Times in your zone, ${zone} (${offset(now)}); hover one for UTC`;
    }
  });
})();
