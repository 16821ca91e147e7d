/* Minimal test harness: each test file is one executable run by ctest.
 *   CHECK(cond) / CHECK_EQ_INT(a,b) / CHECK_NEAR(a,b,tol) record a failure and go on;
 *   RUN(fn) runs one named case; finish with `return check_summary();`
 *   SKIP_ALL("why") exits 77 (ctest shows "Skipped") after printing the reason. */
#ifndef WEFT_TEST_CHECK_H
#define WEFT_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures_, check_cases_, check_case_failed_;

#define CHECK(cond) do { if (!(cond)) { check_case_failed_ = 1; check_failures_++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { if (!(cond)) { check_case_failed_ = 1; check_failures_++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
    if (a_ != b_) { check_case_failed_ = 1; check_failures_++; \
    fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, a_, b_); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (double)(a), b_ = (double)(b); \
    if (!(fabs(a_ - b_) <= (tol))) { check_case_failed_ = 1; check_failures_++; \
    fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, #a, #b, \
            (double)(tol), a_, b_); } } while (0)

#define RUN(fn) do { check_case_failed_ = 0; check_cases_++; fn(); \
    printf("%s %s\n", check_case_failed_ ? "FAIL" : "ok  ", #fn); fflush(stdout); } while (0)

#define SKIP_ALL(...) do { printf("SKIP: "); printf(__VA_ARGS__); printf("\n"); exit(77); } while (0)

/* The WEFT_* knobs reach the library as tools/ hands them over (the library
 * reads no environment): before main, from ctest's ENVIRONMENT and the
 * shell; check_env_reapply() after a test changes one. */
#include "tools/env.h"
__attribute__((constructor)) static void check_env_(void)
{
    if (weft_env_apply() != 0) exit(2);
}
static inline void check_env_reapply(void)
{
    if (weft_env_apply_options() != 0) {
        check_case_failed_ = 1;
        check_failures_++;
    }
}

static inline int check_summary(void)
{
    printf("%d cases, %d failed checks\n", check_cases_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#endif
