/* The one source of the link-time layer checks (CMakeLists.txt's *_closed
 * libraries): they hold a layer's whole static library and link with
 * --no-undefined, so a call from that layer into one above it fails the build.
 * This file only gives each such library a translation unit of its own. */
int weft_closed_check_unit;
