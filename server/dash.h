/* The dashboards: weft router's page at GET / polls GET /fleet (its own
 * state, server/router_dash.c); weft serve's smaller page at GET / polls
 * GET /load. The pages are server/dash/{router,serve}.html, embedded at build time by
 * server/dash/embed.cmake: inline CSS and hand-written canvas charts,
 * nothing fetched but the state JSON from the page's own origin. */
#ifndef WEFT_SERVER_DASH_H
#define WEFT_SERVER_DASH_H

#include <jansson.h>
#include <stddef.h>

#include "server/fleet.h"

/* The pages, NUL-terminated; _len excludes the NUL. */
extern const char *const weft_dash_router_html;
extern const size_t weft_dash_router_html_len;
extern const char *const weft_dash_serve_html;
extern const size_t weft_dash_serve_html_len;

/* What a page is served with: never cached, never framed, and a policy
 * that lets it load nothing from anywhere (its script and style are
 * inline; it fetches only from its own origin). */
#define DASH_PAGE_HEADERS                                                                                    \
    "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n"               \
    "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; " \
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'\r\n"

/* The fleet's instances as GET /fleet shows them: a new JSON array (the
 * caller owns it), one object per instance in f's order; NULL when out of
 * memory. now: the fleet's clock (seconds, as given to weft_fleet_apply_load). */
json_t *weft_dash_fleet_instances(const struct fleet *f, double now);

/* An instance's state in one word: "starting" (no report yet), "down" (its
 * health check fails), "open" / "half_open" (its circuit), "draining",
 * "stale" (no report for longer than the fleet's stale_s) or "up". */
const char *weft_dash_instance_state(const struct fleet *f, const struct fleet_instance *in, double now);

#endif
