// proofpool explorer: the live feed of a pool page. No framework, no build step.
//
// A section with data-feed-url asks that URL every data-poll-ms milliseconds for the events after
// data-after (a chain position "<block>-<log>") and puts the rows the server rendered at the top
// of its table, newest first. The page works without this script; the feed then stays as loaded.
"use strict";

(function () {
  const MAX_ROWS = 200; // rows kept in a feed table; older ones drop off the bottom

  function startFeed(section) {
    const url = section.dataset.feedUrl;
    const interval = Number(section.dataset.pollMs) || 2000;
    const body = section.querySelector("tbody");
    const status = section.querySelector(".feed-status");
    const empty = section.querySelector("[data-empty-for]");
    if (!url || !body) return;
    let failing = false;

    function say(text) {
      if (status && status.textContent !== text) status.textContent = text;
    }

    function insert(rows) {
      // rows are newest first: insert the oldest first so the newest ends on top.
      for (let i = rows.length - 1; i >= 0; i -= 1) {
        body.insertAdjacentHTML("afterbegin", rows[i].html);
        body.firstElementChild.classList.add("fresh");
      }
      while (body.children.length > MAX_ROWS) body.lastElementChild.remove();
      if (empty && body.children.length > 0) empty.hidden = true;
    }

    async function poll() {
      const after = section.dataset.after;
      const query = after ? "?after=" + encodeURIComponent(after) : "";
      try {
        const reply = await fetch(url + query, { headers: { Accept: "application/json" } });
        const answer = await reply.json();
        if (!reply.ok) throw new Error(answer.detail || reply.statusText);
        for (const row of body.querySelectorAll("tr.fresh")) row.classList.remove("fresh");
        if (answer.rows.length > 0) {
          insert(answer.rows);
          say(answer.rows.length === 1 ? "1 new event." : answer.rows.length + " new events.");
        }
        if (answer.after) section.dataset.after = answer.after;
        failing = false;
      } catch (error) {
        if (!failing) say("Live updates paused: " + error.message + " Retrying.");
        failing = true;
      }
      window.setTimeout(poll, document.hidden ? interval * 5 : interval);
    }

    window.setTimeout(poll, interval);
  }

  document.querySelectorAll("[data-feed-url]").forEach(startFeed);
})();
