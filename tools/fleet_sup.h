/* `weft fleet`'s supervisor: a set of child processes (weft serve
 * instances, weft router, optionally redis-server) run from one command.
 *
 * Each child's stdout and stderr come back through pipes and are printed on
 * this process's stderr, one line at a time, prefixed with the child's name.
 * A child is "up" once a line of its output matches its ready pattern
 * ("listening on http://" for weft, "Ready to accept connections" for
 * redis); when every child has been up once, on_ready runs (once).
 *
 * A child that exits while the fleet runs is restarted with the same
 * arguments (so the same port: the router sees it leave and return) after a
 * backoff that doubles from 0.5 s up to max_backoff_s and resets once the
 * child has stayed up for 30 s.
 *
 * Stopping (SIGTERM/SIGINT, or weft_fleet_sup_stop): children stop in order of
 * their stop_rank, lowest first: SIGTERM to every child of the lowest rank
 * still running, and the next rank once they have all exited -- so the
 * router drains its streams while the instances still answer, and Redis
 * goes last. A second signal sends SIGTERM to every child at once (weft's
 * "cut now"); past drain_s + 10 s whatever is left gets SIGKILL.
 *
 * Children run in their own process group (a terminal's Ctrl-C reaches the
 * supervisor only, which stops them in order). weft children are started
 * with WEFT_FLEET_PARENT=<pid> so that they ask the kernel for SIGTERM if
 * the supervisor dies (tools/main.c), and WEFT_FLEET_CPUS=<list> to pin
 * them. One thread (the caller's) runs everything. */
#ifndef WEFT_TOOLS_FLEET_SUP_H
#define WEFT_TOOLS_FLEET_SUP_H

#include <stdbool.h>
#include <stdint.h>

#define FLEET_SUP_MAX_CHILDREN 40
#define FLEET_SUP_MAX_ARGS 96

struct fleet_child_spec {
    char name[48];                       /* the output prefix ("cpu:0", "router", "redis") */
    char *argv[FLEET_SUP_MAX_ARGS + 1];  /* argv[0] the program (a path, or a name on PATH); NULL-ended */
    int stop_rank;                       /* lower stops first */
    const char *ready_pattern;           /* a line containing this means up */
    const char *cpus;                    /* weft children: "0", "0-3,6" (NULL: not pinned) */
    bool weft;                           /* a weft process (WEFT_FLEET_* in its environment) */
};

struct fleet_sup;

/* Called once when every child has printed its ready pattern; children's
 * names and pids are readable through weft_fleet_sup_pid. */
typedef void (*fleet_sup_ready_cb)(struct fleet_sup *s, void *ud);

/* Copies the specs (argv strings included). NULL on out of memory or more
 * than FLEET_SUP_MAX_CHILDREN children (with a message on stderr). */
struct fleet_sup *weft_fleet_sup_create(const struct fleet_child_spec *specs, uint32_t n, double max_backoff_s,
                                   double drain_s, fleet_sup_ready_cb on_ready, void *ud);
/* Start every child and run until all have stopped after a stop. Returns 0,
 * or 1 when a child could not be started at all (not found: nothing is left
 * running). Installs SIGTERM/SIGINT handlers for the duration. */
int weft_fleet_sup_run(struct fleet_sup *s);
/* The child's current pid (0 while it is not running). */
int weft_fleet_sup_pid(const struct fleet_sup *s, uint32_t i);
/* Times child i has been restarted. */
uint32_t weft_fleet_sup_restarts(const struct fleet_sup *s, uint32_t i);
void weft_fleet_sup_stop(struct fleet_sup *s);
void weft_fleet_sup_free(struct fleet_sup *s);

/* For a weft child (tools/main.c, before the command runs): when
 * WEFT_FLEET_PARENT is set, die with SIGTERM if that process goes away,
 * and pin to WEFT_FLEET_CPUS. Returns non-zero when the parent is already
 * gone or the CPU list is bad (the child should exit). */
int weft_fleet_child_setup(void);

#endif
