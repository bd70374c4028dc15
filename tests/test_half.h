/* Which half of a test binary's cases runs: the default suite's or the
 * `long` label's (tests/CMakeLists.txt, st_add_test's LONG pattern).
 *
 *   test              every case
 *   test PATTERN      the cases PATTERN names (cmocka's glob: * and ?)
 *   test --skip PAT   every case but those PAT names
 *
 * Call it before cmocka_run_group_tests. */
#ifndef SHMTRAIN_TESTS_TEST_HALF_H
#define SHMTRAIN_TESTS_TEST_HALF_H

void st_test_half(int argc, char **argv);

#endif
