// The model page's live panel (obleth cockpit): polls the live/ JSON view every few seconds and
// redraws the replicas, the badge, the banner and the launch history without reloading the page.
// Served as a static file (no inline script or handler, no CDN). Every value is set as text.
(function () {
  "use strict";
  var root = document.getElementById("obleth-cockpit");
  if (!root) { return; }
  var liveUrl = root.dataset.liveUrl;
  var actUrl = root.dataset.actUrl;
  var logUrl = root.dataset.logUrl;
  var refreshMs = parseInt(root.dataset.refreshMs, 10) || 3000;
  var csrfInput = root.querySelector("input[name=csrfmiddlewaretoken]");
  var csrf = csrfInput ? csrfInput.value : "";
  var ZERO = "00000000-0000-0000-0000-000000000000";
  var current = null;     // the last panel data
  var openLog = null;     // {launch, stream, title}
  var actionsDrawn = false;

  function $(id) { return document.getElementById(id); }

  function el(tag, props, children) {
    var node = document.createElement(tag);
    Object.keys(props || {}).forEach(function (key) {
      var value = props[key];
      if (value === null || value === undefined || value === false) { return; }
      if (key === "text") { node.textContent = String(value); }
      else if (key === "cls") { node.className = value; }
      else if (key.indexOf("data-") === 0 || key === "title" || key === "type" ||
               key === "href" || key === "name" || key === "min" || key === "max" ||
               key === "value" || key === "role" || key === "aria-label") {
        node.setAttribute(key, String(value));
      } else { node[key] = value; }
    });
    (children || []).forEach(function (child) {
      if (child === null || child === undefined) { return; }
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }

  function when(iso) {
    if (!iso) { return "—"; }
    var d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleString();
  }

  function badge(status, label) {
    return el("span", { cls: "ck-badge", "data-status": status || "unknown", text: label || status || "—" });
  }

  function logUrlFor(launchId, stream, extra) {
    return logUrl.replace(ZERO, launchId) + "?stream=" + encodeURIComponent(stream) + (extra || "");
  }

  function logButtons(logs, label) {
    if (!logs) { return el("span", { cls: "ck-muted", text: "no job yet" }); }
    var wrap = el("span", { cls: "ck-logs" });
    var streams = logs.same_file ? ["stdout"] : ["stdout", "stderr"];
    streams.forEach(function (stream) {
      var info = logs[stream];
      var name = logs.same_file ? (label || "log") : (label ? label + " " : "") + stream;
      var btn = el("button", {
        type: "button", cls: "button ck-log-open", text: name,
        title: info.readable ? info.path : info.path + " — " + info.why,
        "data-launch": logs.launch_id, "data-stream": stream, "data-job": logs.job_id || ""
      });
      wrap.appendChild(btn);
    });
    return wrap;
  }

  function probeCell(r) {
    if (!r.probe) { return el("td", { cls: "ck-muted", text: r.state === "pending" ? "—" : "not probed yet" }); }
    return el("td", { cls: "ck-probe", "data-kind": r.probe.code }, [
      el("div", { text: r.probe.sentence }),
      r.probe.fix ? el("div", { cls: "ck-fix", text: "→ " + r.probe.fix }) : null,
      el("div", { cls: "ck-muted", text: "at " + when(r.last_probe_at) })
    ]);
  }

  function slurmCell(r) {
    var parts = [el("div", { cls: "ck-slurm-state", text: (r.slurm_state || "—") + (r.slurm_reason ? " (" + r.slurm_reason + ")" : "") })];
    if (r.pending) {
      parts.push(el("div", { cls: "ck-pending", text: r.pending.sentence }));
      if (r.pending.fix) { parts.push(el("div", { cls: "ck-fix", text: "→ " + r.pending.fix })); }
    } else if (r.message) {
      parts.push(el("div", { cls: "ck-muted", text: r.message }));
    }
    return el("td", {}, parts);
  }

  function endpointCell(r) {
    var e = r.endpoint;
    if (!e) { return el("td", { cls: "ck-muted", text: r.state === "healthy" ? "not registered" : "—" }); }
    var next = e.last_checked_at ? "checked " + when(e.last_checked_at) : "not checked yet";
    if (e.next_check_in_secs !== null) { next += "; next check in " + e.next_check_in_secs + "s"; }
    return el("td", {}, [
      badge(e.health_status),
      el("div", { cls: "ck-url", text: e.api_base }),
      e.last_message ? el("div", { cls: "ck-muted", text: e.last_message }) : null,
      el("div", { cls: "ck-muted", text: (e.consecutive_failures ? e.consecutive_failures + " failed checks; " : "") + next })
    ]);
  }

  function renderReplicas(data) {
    var body = $("ck-replicas").tBodies[0];
    var rows = data.replicas.map(function (r) {
      var actions = el("td", { cls: "ck-row-actions" }, [
        data.can.restart && r.state !== "lost" && r.state !== "draining"
          ? el("button", { type: "button", cls: "button ck-act", text: r.cancel_requested ? "Restarting…" : "Restart",
                           "data-action": "restart", "data-replica": r.id, disabled: r.cancel_requested })
          : null,
        data.can.read_logs ? logButtons(r.logs, "log") : null,
        data.can.read_logs && r.previous_logs ? logButtons(r.previous_logs, "last job") : null
      ]);
      return el("tr", { "data-replica": r.id, "data-state": r.state }, [
        el("td", {}, [badge(r.state, r.state_label), el("div", { cls: "ck-state-words", text: r.state_words })]),
        el("td", { cls: "ck-mono", text: r.node || "—" }),
        el("td", { cls: "ck-mono ck-job", text: r.job_id || "—" }),
        el("td", { cls: "ck-mono", text: r.port ? String(r.port) : (r.port_base ? r.port_base + "+" : "—") }),
        el("td", { text: r.age }),
        el("td", { cls: "ck-in-state", text: r.in_state }),
        probeCell(r),
        slurmCell(r),
        endpointCell(r),
        actions
      ]);
    });
    if (!rows.length) {
      rows = [el("tr", {}, [el("td", { colspan: 10, cls: "ck-muted", text: "No replica." })])];
      rows[0].firstChild.setAttribute("colspan", "10");
    }
    body.replaceChildren.apply(body, rows);
  }

  function renderLaunches(data) {
    var body = $("ck-launches").tBodies[0];
    var rows = data.launches.map(function (l) {
      return el("tr", { "data-launch": l.id }, [
        el("td", { cls: "ck-mono", text: l.job_id || "—" }),
        el("td", { text: when(l.submitted_at) }),
        el("td", { text: when(l.healthy_at) }),
        el("td", { text: when(l.ended_at) }),
        el("td", {}, [badge(l.ended ? (l.end_state === "rejected" ? "error" : "lost") : "ok", l.end_state)]),
        el("td", { text: l.end_reason || "" }),
        el("td", {}, [data.can.read_logs && l.job_id ? logButtons(l.logs, "") : el("span", { cls: "ck-muted", text: "—" })])
      ]);
    });
    body.replaceChildren.apply(body, rows);
  }

  function drawActions(data) {
    var box = $("ck-actions");
    var spec = data.spec;
    var items = [];
    if (spec && data.can.scale) {
      var input = el("input", { type: "number", min: 0, max: 1000, name: "target_replicas", id: "ck-scale-count",
                                value: spec.target_replicas, "aria-label": "replica count" });
      items.push(el("label", { text: "Replicas " }, [input]));
      items.push(el("button", { type: "button", cls: "button ck-act", "data-action": "scale", text: "Scale" }));
    }
    if (data.can.enable) {
      var enabled = data.model.enabled && (!spec || spec.enabled);
      items.push(el("button", { type: "button", cls: "button ck-act", id: "ck-toggle",
                                "data-action": enabled ? "disable" : "enable", text: enabled ? "Disable" : "Enable" }));
    }
    if (spec && data.can.try_again) {
      items.push(el("button", { type: "button", cls: "button ck-act", id: "ck-try-again", "data-action": "try_again",
                                text: "Try once more", title: "Clear lost replicas and the refused-launch error; launch again" }));
    }
    if (!items.length) { items.push(el("span", { cls: "ck-muted", text: "Your role shows this model read-only." })); }
    box.replaceChildren.apply(box, items);
    actionsDrawn = true;
  }

  function updateActions(data) {
    var toggle = $("ck-toggle");
    if (toggle) {
      var enabled = data.model.enabled && (!data.spec || data.spec.enabled);
      toggle.dataset.action = enabled ? "disable" : "enable";
      toggle.textContent = enabled ? "Disable" : "Enable";
    }
    var count = $("ck-scale-count");
    if (count && document.activeElement !== count && data.spec) { count.value = data.spec.target_replicas; }
    var tryAgain = $("ck-try-again");
    if (tryAgain && data.spec) {
      tryAgain.classList.toggle("ck-emphasis", !!(data.spec.stopped || data.refusal));
    }
  }

  function render(data) {
    current = data;
    var b = $("ck-badge");
    b.dataset.status = data.model.enabled ? data.model.health_status : "disabled";
    b.textContent = "model " + (data.model.enabled ? data.model.health_status : "disabled");
    b.title = data.model.health_message || "";
    $("ck-reason").textContent = data.model.reason;
    var scaling = $("ck-autoscale");
    if (scaling) {
      var auto = data.spec && data.spec.autoscale;
      scaling.hidden = !auto;
      scaling.textContent = auto ? auto.line : "";
    }
    var banner = $("ck-banner");
    if (data.banner) {
      banner.replaceChildren(el("strong", { text: data.banner.text }),
                             data.banner.detail ? el("div", { text: "Last pass: " + data.banner.detail }) : "");
      banner.hidden = false;
    } else { banner.hidden = true; banner.replaceChildren(); }
    if (!actionsDrawn) { drawActions(data); } else { updateActions(data); }
    renderReplicas(data);
    renderLaunches(data);
    var spec = data.spec;
    var target = spec && spec.autoscale && spec.autoscale.replicas !== null
      ? spec.autoscale.replicas + " (autoscaled)" : (spec ? spec.target_replicas : "");
    var extra = spec ? " · target " + target + " · failed launches " + spec.failed_launches +
      (spec.max_job_failures ? "/" + spec.max_job_failures : "") +
      (spec.submit_cooldown_until ? " · next submit after " + when(spec.submit_cooldown_until) : "") : "";
    $("ck-updated").textContent = "updated " + new Date().toLocaleTimeString() + extra;
    $("ck-updated").classList.remove("ck-stale");
  }

  function load() {
    return fetch(liveUrl, { credentials: "same-origin", headers: { "Accept": "application/json" }, cache: "no-store" })
      .then(function (resp) {
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.json();
      })
      .then(render)
      .catch(function (err) {
        var u = $("ck-updated");
        u.textContent = "refresh failed (" + err.message + "); retrying";
        u.classList.add("ck-stale");
      });
  }

  function say(text, ok) {
    var box = $("ck-message");
    box.textContent = text;
    box.dataset.ok = ok ? "1" : "0";
    box.hidden = false;
  }

  function act(action, fields) {
    var body = new URLSearchParams(fields || {});
    return fetch(actUrl.replace("ACTION", action), {
      method: "POST", credentials: "same-origin", body: body,
      headers: { "X-CSRFToken": csrf, "Accept": "application/json" }
    }).then(function (resp) {
      return resp.json().catch(function () { return { ok: false, message: "HTTP " + resp.status }; });
    }).then(function (answer) {
      say(answer.message || (answer.ok ? "Done." : "Refused."), answer.ok);
      return load();
    }).catch(function (err) { say("The action failed: " + err.message, false); });
  }

  var CONFIRM = {
    restart: "Restart this replica? Its job is cancelled and a fresh one launched.",
    disable: "Disable this model? The gateway refuses it and its replicas are drained.",
    try_again: "Try once more? Lost replicas are cleared and the launch is tried again."
  };

  function fetchLog() {
    if (!openLog) { return; }
    var url = logUrlFor(openLog.launch, openLog.stream, "&tail=400");
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" }, cache: "no-store" })
      .then(function (resp) { return resp.json(); })
      .then(function (answer) {
        var where = $("ck-log-where");
        var text = $("ck-log-text");
        if (!answer.ok) {
          where.textContent = answer.message || JSON.stringify(answer.errors || answer);
          text.textContent = "";
          return;
        }
        if (answer.readable) {
          where.textContent = answer.path + (answer.truncated ? " (last lines)" : "") +
            (answer.modified_at ? " · written " + when(answer.modified_at) : "");
          var atBottom = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
          text.textContent = answer.text || "(empty)";
          if (atBottom || $("ck-log-follow").checked) { text.scrollTop = text.scrollHeight; }
          $("ck-log-download").hidden = false;
        } else {
          where.textContent = "The file is at " + answer.path + " on the cluster; it cannot be shown here: " + answer.why + ".";
          text.textContent = "";
          $("ck-log-download").hidden = true;
        }
      })
      .catch(function (err) { $("ck-log-where").textContent = "Could not read the log: " + err.message; });
  }

  function showLog(launch, stream, job) {
    openLog = { launch: launch, stream: stream };
    $("ck-log").hidden = false;
    $("ck-log-title").textContent = "Job " + (job || "?") + " — " + stream;
    $("ck-log-download").setAttribute("href", logUrlFor(launch, stream, "&download=1"));
    $("ck-log-text").textContent = "loading…";
    fetchLog();
  }

  root.addEventListener("click", function (event) {
    var target = event.target.closest("button");
    if (!target || !root.contains(target)) { return; }
    if (target.classList.contains("ck-log-open")) {
      showLog(target.dataset.launch, target.dataset.stream, target.dataset.job);
      return;
    }
    if (target.id === "ck-log-close") { openLog = null; $("ck-log").hidden = true; return; }
    var action = target.dataset.action;
    if (!action) { return; }
    if (CONFIRM[action] && !window.confirm(CONFIRM[action])) { return; }
    var fields = {};
    if (action === "restart") { fields.replica = target.dataset.replica; }
    if (action === "scale") { fields.target_replicas = $("ck-scale-count").value; }
    target.disabled = true;
    act(action, fields).then(function () { target.disabled = false; });
  });

  load();
  window.setInterval(function () {
    if (document.hidden) { return; }
    load();
    if (openLog && $("ck-log-follow").checked) { fetchLog(); }
  }, refreshMs);
})();
