/* th_port_stdio.c: the MLPerf Tiny harness as a host program (tests): the serial port is
 * stdin/stdout, the clock CLOCK_MONOTONIC. The end of stdin ends the program with status 0. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "th_api.h"

static uint64_t g_start_us;

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

void th_serialport_initialize(void) {}

char th_getchar(void) {
  fflush(stdout);
  int c = getchar();
  if (c == EOF) exit(0);
  return (char)c;
}

void th_port_putchar(char c) { putchar(c); }

void th_port_timer_start(void) { g_start_us = now_us(); }

uint64_t th_port_microseconds(void) { return now_us() - g_start_us; }
