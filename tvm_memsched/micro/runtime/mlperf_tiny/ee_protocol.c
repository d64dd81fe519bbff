/* ee_protocol.c: MLPerf Tiny's runner commands, device side (see ee_protocol.h for the commands).
 *
 * Characters arrive one at a time (ee_serial_callback, from a polling loop or a UART interrupt); a
 * '%' completes a command, which th_command_ready hands to the main loop, which runs it with
 * ee_serial_command_parser_callback outside any interrupt. The runner waits for "m-ready" before
 * it sends the next command, so one command buffer suffices.
 *
 * Every malformed command gets an "e-[...]" answer and leaves the state as it was: the download
 * buffer is written only by a 'db' chunk whose digits are all valid, never beyond the 'db load'
 * size, which never exceeds the buffer (MAX_DB_INPUT_SIZE: the model's input bytes). */
#include "ee_protocol.h"

#include <string.h>

#include "th_api.h"

#if MAX_DB_INPUT_SIZE < 1
#error "MAX_DB_INPUT_SIZE (th_config.h) must be at least 1"
#endif

static char g_command[EE_CMD_SIZE + 1u];
static size_t g_command_length;
static int g_command_too_long;
static int g_parser_enabled;

static _Alignas(16) uint8_t g_buffer[MAX_DB_INPUT_SIZE];
static size_t g_buffer_expected; /* 'db load N': N; 0 before the first */
static size_t g_buffer_loaded;   /* bytes of it received */

uint8_t* ee_buffer_data(void) { return g_buffer; }
size_t ee_buffer_loaded(void) { return g_buffer_loaded; }
size_t ee_buffer_expected(void) { return g_buffer_expected; }

size_t ee_get_buffer(uint8_t* buffer, size_t max_len) {
  size_t n = g_buffer_loaded < max_len ? g_buffer_loaded : max_len;
  if (buffer != NULL && n > 0u) memcpy(buffer, g_buffer, n);
  return n;
}

void ee_serial_callback(char c) {
  if (c == EE_CMD_TERMINATOR) {
    g_command[g_command_length] = '\0';
    g_command_length = 0u;
    th_command_ready(g_command);
  } else if (c == '\r' || c == '\n') {
    /* line ends typed in a terminal: not part of a command */
  } else if (g_command_length < EE_CMD_SIZE) {
    g_command[g_command_length++] = c;
  } else {
    g_command_too_long = 1; /* answered with an error when the command ends */
  }
}

/* The next space-separated token of *rest (NUL-terminated in place), or NULL. */
/* ``command`` (at most EE_CMD_SIZE characters of it) into ``copy``, terminated: tokens are cut in the copy */
static void copy_command(char copy[EE_CMD_SIZE + 1u], const char* command) {
  size_t length = strlen(command);
  if (length > EE_CMD_SIZE) length = EE_CMD_SIZE;
  memcpy(copy, command, length);
  copy[length] = '\0';
}

static char* next_token(char** rest) {
  char* p = *rest;
  while (*p == ' ' || *p == '\t') ++p;
  if (*p == '\0') {
    *rest = p;
    return NULL;
  }
  char* token = p;
  while (*p != '\0' && *p != ' ' && *p != '\t') ++p;
  if (*p != '\0') *p++ = '\0';
  *rest = p;
  return token;
}

/* A decimal number of at most 9 digits (no sign, no spaces); 0 when `text` is not one. */
static int parse_count(const char* text, size_t* value) {
  size_t v = 0u, digits = 0u;
  for (; *text != '\0'; ++text, ++digits) {
    if (*text < '0' || *text > '9' || digits >= 9u) return 0;
    v = v * 10u + (size_t)(*text - '0');
  }
  if (digits == 0u) return 0;
  *value = v;
  return 1;
}

long ee_hexdec(const char* hex) {
  long value = 0;
  if (*hex == '\0') return -1;
  for (; *hex != '\0'; ++hex) {
    int d;
    char c = *hex;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return -1;
    }
    if (value > 0x7FFFFFFL) return -1; /* would not fit: not a byte anyway */
    value = value * 16 + d;
  }
  return value;
}

static void print_buffer(size_t count, size_t offset) {
  for (size_t i = 0; i < count; ++i) {
    if (i % 8u == 0u) th_printf("m-buffer-");
    th_printf("%02x", (unsigned)g_buffer[offset + i]);
    th_printf(((i + 1u) % 8u == 0u || i + 1u == count) ? "\r\n" : "-");
  }
}

static void load_chunk(const char* digits) {
  size_t n = strlen(digits);
  if (g_buffer_expected == 0u) {
    th_printf("e-[db: no 'db load N' before the data]\r\n");
    return;
  }
  if (g_buffer_loaded == g_buffer_expected) {
    th_printf("e-[db: all %lu bytes are loaded already; 'db load N' starts again]\r\n",
              (unsigned long)g_buffer_expected);
    return;
  }
  if (n % 2u != 0u) {
    th_printf("e-[db: odd number of hex digits (%lu)]\r\n", (unsigned long)n);
    return;
  }
  for (size_t i = 0; i < n; ++i) { /* the whole chunk is checked before any byte is stored */
    char pair[2] = {digits[i], '\0'};
    if (ee_hexdec(pair) < 0) {
      th_printf("e-[db: invalid hex digit at position %lu]\r\n", (unsigned long)i);
      return;
    }
  }
  for (size_t i = 0; i + 1u < n && g_buffer_loaded < g_buffer_expected; i += 2u) {
    char pair[3] = {digits[i], digits[i + 1u], '\0'};
    g_buffer[g_buffer_loaded++] = (uint8_t)ee_hexdec(pair);
  }
  if (g_buffer_loaded == g_buffer_expected) th_printf("m-load-done\r\n"); /* extra digits are ignored */
}

arg_claimed_t ee_buffer_parse(char* command) {
  char* rest = command;
  char* word = next_token(&rest);
  if (word == NULL || strcmp(word, "db") != 0) return EE_ARG_UNCLAIMED;
  char* sub = next_token(&rest);
  if (sub == NULL) {
    th_printf("e-[Command 'db' requires a subcommand]\r\n");
  } else if (strcmp(sub, "load") == 0) {
    char* count = next_token(&rest);
    size_t n = 0u;
    if (count == NULL) {
      th_printf("e-[Command 'db load' requires the # of bytes]\r\n");
    } else if (!parse_count(count, &n) || n == 0u) {
      th_printf("e-[Command 'db load' needs a byte count from 1 to %lu]\r\n", (unsigned long)MAX_DB_INPUT_SIZE);
    } else if (n > (size_t)MAX_DB_INPUT_SIZE) {
      th_printf("e-[db load: %lu bytes exceed the input buffer of %lu bytes]\r\n", (unsigned long)n,
                (unsigned long)MAX_DB_INPUT_SIZE);
    } else {
      g_buffer_expected = n;
      g_buffer_loaded = 0u;
      th_printf("m-[Expecting %lu bytes]\r\n", (unsigned long)n);
    }
  } else if (strcmp(sub, "print") == 0) {
    char* count = next_token(&rest);
    char* offset = count != NULL ? next_token(&rest) : NULL;
    size_t n = g_buffer_loaded, at = 0u;
    if ((count != NULL && !parse_count(count, &n)) || (offset != NULL && !parse_count(offset, &at))) {
      th_printf("e-[db print: N and OFFSET are decimal numbers]\r\n");
    } else if (at > g_buffer_loaded || n > g_buffer_loaded - at) {
      th_printf("e-[db print: %lu bytes at %lu are beyond the %lu loaded]\r\n", (unsigned long)n,
                (unsigned long)at, (unsigned long)g_buffer_loaded);
    } else {
      print_buffer(n, at);
    }
  } else {
    load_chunk(sub);
  }
  return EE_ARG_CLAIMED;
}

static void print_help(void) {
  th_printf("%s\r\n\r\n", EE_FW_VERSION);
  th_printf("help         : this list\r\n");
  th_printf("name         : the device's name\r\n");
  th_printf("timestamp    : a timestamp\r\n");
  th_printf("profile      : the firmware and model versions\r\n");
  th_printf("db load N    : expect N input bytes (at most %lu)\r\n", (unsigned long)MAX_DB_INPUT_SIZE);
  th_printf("db HH[HH]*   : input bytes as hex digits, appended until N\r\n");
  th_printf("db print [N [OFFSET]] : the loaded bytes as hex\r\n");
  th_printf("infer N [W]  : W warm-up inferences (default %lu), then N timed ones\r\n",
            (unsigned long)EE_DEFAULT_WARMUP);
  th_printf("results      : the outputs of the last inference\r\n");
  th_printf("model %s (%s): %lu input bytes\r\n", TH_MODEL_NAME, TH_MODEL_VERSION, (unsigned long)MAX_DB_INPUT_SIZE);
  for (int i = 0; i < TH_NUM_INPUTS; ++i) {
    const th_input_desc_t* d = &th_input_descs[i];
    th_printf("  input %d '%s': bytes %lu to %lu\r\n", i, th_input_names[i], (unsigned long)d->wire_offset,
              (unsigned long)(d->wire_offset + d->wire_bytes));
  }
}

arg_claimed_t ee_profile_parse(char* command) {
  char copy[EE_CMD_SIZE + 1u];
  copy_command(copy, command);
  char* rest = copy;
  char* word = next_token(&rest);
  if (word == NULL) return EE_ARG_UNCLAIMED;
  if (strcmp(word, "profile") == 0) {
    th_printf("m-profile-[%s]\r\n", EE_FW_VERSION);
    th_printf("m-model-[%s]\r\n", TH_MODEL_VERSION);
  } else if (strcmp(word, "help") == 0) {
    print_help();
  } else if (strcmp(word, "db") == 0) {
    return ee_buffer_parse(command);
  } else if (strcmp(word, "infer") == 0) {
    char* count = next_token(&rest);
    char* warmup = count != NULL ? next_token(&rest) : NULL;
    size_t n = 1u, w = EE_DEFAULT_WARMUP;
    if (count != NULL && (!parse_count(count, &n) || n == 0u)) {
      th_printf("e-[Inference iterations must be >0]\r\n");
    } else if (warmup != NULL && !parse_count(warmup, &w)) {
      th_printf("e-[Inference warmup must be >=0]\r\n");
    } else {
      ee_infer(n, w);
    }
  } else if (strcmp(word, "results") == 0) {
    th_results();
  } else {
    return EE_ARG_UNCLAIMED;
  }
  return EE_ARG_CLAIMED;
}

void ee_infer(size_t n, size_t n_warmup) {
  if (g_buffer_expected == 0u || g_buffer_loaded != g_buffer_expected) {
    th_printf("e-[infer: no complete input ('db load N' and N bytes of 'db' data; %lu of %lu loaded)]\r\n",
              (unsigned long)g_buffer_loaded, (unsigned long)g_buffer_expected);
    return;
  }
  th_load_tensor();
  if (!th_tensor_ready()) return; /* th_load_tensor said why */
  th_printf("m-warmup-start-%lu\r\n", (unsigned long)n_warmup);
  for (size_t i = 0; i < n_warmup; ++i) th_infer();
  th_printf("m-warmup-done\r\n");
  th_printf("m-infer-start-%lu\r\n", (unsigned long)n);
  th_timestamp();
  th_pre();
  for (size_t i = 0; i < n; ++i) th_infer();
  th_post();
  th_timestamp();
  th_printf("m-infer-done\r\n");
  th_results();
}

void ee_serial_command_parser_callback(char* command) {
  if (!g_parser_enabled) return;
  if (g_command_too_long) {
    g_command_too_long = 0;
    th_printf("e-[Command longer than %lu characters]\r\n", (unsigned long)EE_CMD_SIZE);
  } else {
    char copy[EE_CMD_SIZE + 1u];
    copy_command(copy, command);
    char* rest = copy;
    char* word = next_token(&rest);
    if (word == NULL) {
      /* an empty command: only m-ready */
    } else if (strcmp(word, "name") == 0) {
      th_printf(EE_MSG_NAME, EE_DEVICE_NAME, TH_VENDOR_NAME_STRING);
    } else if (strcmp(word, "timestamp") == 0) {
      th_timestamp();
    } else if (ee_profile_parse(command) == EE_ARG_UNCLAIMED) {
      th_printf("e-[Unknown command: %s]\r\n", word);
    }
  }
  th_printf(EE_MSG_READY);
}

void ee_benchmark_initialize(void) {
  th_serialport_initialize();
  th_timestamp_initialize();
  th_final_initialize();
  th_printf(EE_MSG_INIT_DONE);
  g_parser_enabled = 1;
  th_printf(EE_MSG_READY);
}
