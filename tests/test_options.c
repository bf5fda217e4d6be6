/* test_options.c -- the API's options: sizes and versions, which of an option and its variable wins, the device, the engine's context and queue. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exact.h"
#include "golden.h"
#include "logbuf.h"
#include "base/hooks.h"
#include "card/oracle.h"
#include "card/tune.h"
#include "share/access.h"

static bml_pool *pool;

static void setup(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SHARE");
  unsetenv("BANKML_GPU_LIMIT");
  unsetenv("BANKML_GPU_QUEUES");
  unsetenv("BANKML_VERIFY");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  bml__oracle_hooks h = {.quick = true};
  bml__oracle_set_hooks(&h);
  bml__tune_disable(true); /* the remembered tunables, else the defaults: no measuring here */
  cr_assert_eq(bml_pool_open(2, &pool), 0);
}

static void teardown(void) {
  bml_pool_close(pool);
  bml__oracle_set_hooks(NULL);
}

TestSuite(options, .init = setup, .fini = teardown, .timeout = 120);

static char logged[16384];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

static int open_logged(const bml_worker_options *o, bml_worker **w) {
  *w = NULL;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  int rc = bml_worker_open_with(pool, o, w);
  bml_log_set_sink(NULL, NULL);
  return rc;
}

/* The listing with PoCL allowed, and in *index the card the tests use
 * (the first usable one); a skip where there is none. */
static bml_devices *listing(size_t *index) {
  bml_discover_options o;
  bml_discover_options_init(&o);
  o.software = 1;
  o.gpu = "";
  bml_devices *l = NULL;
  cr_assert_eq(bml_devices_discover(&o, &l), 0);
  size_t i = 0;
  while (i < bml_devices_count(l) && !bml_devices_get(l, i)->usable) i++;
  if (i == bml_devices_count(l)) {
    bml_devices_free(l);
    cr_skip_test("no usable OpenCL device here (apt-get install pocl-opencl-icd)");
  }
  *index = i;
  return l;
}

static size_t card_index(void) {
  size_t i;
  bml_devices_free(listing(&i));
  return i;
}

static json_t *status(bml_worker *w) {
  char *text = NULL;
  cr_assert_eq(bml_worker_status_json(w, &text), 0);
  json_t *j = json_loads(text, 0, NULL);
  cr_assert_not_null(j, "%s", text);
  free(text);
  return j;
}

/* A product on the worker, every row compared with the CPU's. */
static void expect_exact(bml_worker *w) {
  int rc;
  const long bad = exact_worker_product(w, 257, 2048, 5, true, &rc);
  cr_assert_eq(rc, 0, "%s", bml_strerror(rc));
  cr_expect_lt(bad, 0, "row %ld differs", bad);
}

/* ---- versions and sizes ------------------------------------------------------------------ */

/* The header's version is configure's (AC_INIT), which the library says. */
Test(options, the_headers_version_is_configures) {
  char header[32];
  snprintf(header, sizeof header, "%d.%d.%d", BML_VERSION_MAJOR, BML_VERSION_MINOR, BML_VERSION_PATCH);
  cr_expect_str_eq(header, PACKAGE_VERSION, "include/bankml-cl.h says %s, configure.ac's AC_INIT %s", header,
                   PACKAGE_VERSION);
  cr_expect_str_eq(bml_version_string(), PACKAGE_VERSION);
  cr_expect_eq(BML_VERSION_NUMBER, BML_VERSION_MAJOR * 10000 + BML_VERSION_MINOR * 100 + BML_VERSION_PATCH);
}

Test(options, init_sets_the_size_and_every_default) {
  bml_worker_options o;
  memset(&o, 0x5a, sizeof o);
  bml_worker_options_init(&o);
  cr_expect_eq(o.size, sizeof o);
  cr_expect(o.device == NULL && o.software == -1 && o.share < 0 && o.limit < 0 && o.queues == 0 &&
            o.verify == BML_VERIFY_DEFAULT && o.cl_context == NULL && o.cl_queue == NULL);
  bml_discover_options d;
  memset(&d, 0x5a, sizeof d);
  bml_discover_options_init(&d);
  cr_expect(d.size == sizeof d && d.gpu == NULL && d.software == -1);
  bml_verify_options v;
  memset(&v, 0x5a, sizeof v);
  bml_verify_options_init(&v);
  cr_expect(v.size == sizeof v && v.on_line == NULL && v.quick == 0);
}

Test(options, a_size_below_the_first_versions_is_refused) {
  bml_worker_options o;
  bml_worker_options_init(&o);
  bml_worker *w;
  o.size = 0; /* a struct filled by hand, without the init */
  cr_expect_eq(open_logged(&o, &w), BML_EINVAL);
  cr_expect(strstr(logged, "bml_worker_options.size=0") != NULL, "%s", logged);
  o.size = offsetof(bml_worker_options, cl_queue);
  cr_expect_eq(open_logged(&o, &w), BML_EINVAL);
  bml_discover_options d;
  bml_discover_options_init(&d);
  d.size = 4;
  bml_devices *l = NULL;
  cr_expect_eq(bml_devices_discover(&d, &l), BML_EINVAL);
  bml_verify_options v;
  bml_verify_options_init(&v);
  v.size = 8; /* a size and nothing else */
  bml_discover_options_init(&d);
  d.gpu = "off";
  cr_assert_eq(bml_devices_discover(&d, &l), 0);
  const size_t n = bml_devices_count(l);
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  cr_expect_eq(bml_devices_verify(l, 0, &v), BML_EINVAL);
  bml_log_set_sink(NULL, NULL);
  bml_devices_free(l);
  if (n == 0) cr_skip_test("no OpenCL device here: bml_devices_verify's options were not checked");
  cr_expect(strstr(logged, "bml_verify_options.size=") != NULL, "%s", logged);
}

/* A newer header's struct: its members past this library's are taken
 * where they are zero (the defaults they stand for), refused otherwise. */
Test(options, a_newer_headers_options_are_taken_where_their_new_members_are_zero) {
  struct {
    bml_worker_options o;
    uint64_t later;
  } newer;
  bml_worker_options_init(&newer.o);
  newer.o.size = sizeof newer;
  newer.o.device = "off"; /* no card: the open is quick */
  newer.later = 0;
  bml_worker *w;
  cr_expect_eq(open_logged(&newer.o, &w), 0, "%s", logged);
  cr_expect_null(w);
  newer.later = 1;
  cr_expect_eq(open_logged(&newer.o, &w), BML_ENOTSUP);
  cr_expect(strstr(logged, "does not know") != NULL, "%s", logged);
}

Test(options, bad_options_are_refused_by_name) {
  static const struct {
    double share, limit;
    int queues, software, verify;
    const char *device, *named;
    int rc;
  } cases[] = {
      {2.0, -1, 0, -1, 0, NULL, "bml_worker_options.share=2", BML_ERANGE},
      {-1, 0.01, 0, -1, 0, NULL, "bml_worker_options.limit=0.01", BML_ERANGE},
      {-1, 1.5, 0, -1, 0, NULL, "bml_worker_options.limit=1.5", BML_ERANGE},
      {-1, -1, 9, -1, 0, NULL, "bml_worker_options.queues=9", BML_ERANGE},
      {-1, -1, 0, 3, 0, NULL, "bml_worker_options.software=3", BML_EINVAL},
      {-1, -1, 0, -1, 7, NULL, "bml_worker_options.verify=7", BML_EINVAL},
      {-1, -1, 0, -1, 0, "pci:nonsense", "bml_worker_options.device=\"pci:nonsense\"", BML_EINVAL},
      {-1, -1, 0, -1, 0, "uuid:12", "bml_worker_options.device=\"uuid:12\"", BML_EINVAL},
      {-1, -1, 0, -1, 0, "4000", "bml_worker_options.device=\"4000\": there is no device 4000", BML_EINVAL},
  };
  for (size_t k = 0; k < BML_ARRAY_SIZE(cases); k++) {
    bml_worker_options o;
    bml_worker_options_init(&o);
    o.share = cases[k].share, o.limit = cases[k].limit, o.queues = cases[k].queues, o.software = cases[k].software;
    o.verify = (bml_verify_policy)cases[k].verify, o.device = cases[k].device;
    bml_worker *w;
    cr_expect_eq(open_logged(&o, &w), cases[k].rc, "case %zu", k);
    cr_expect(strstr(logged, cases[k].named) != NULL, "case %zu: %s not named: %s", k, cases[k].named, logged);
  }
}

/* ---- the options against the environment ----------------------------------------------------- */

/* A field the caller sets wins over its variable, which is then not read
 * (a bad value there is no error); an unset field takes the variable. */
Test(options, explicit_options_win_over_the_environment_and_unset_ones_take_it) {
  const size_t i = card_index();
  char index[16];
  snprintf(index, sizeof index, "%zu", i);
  setenv("BANKML_GPU_SHARE", "0.7", 1);
  setenv("BANKML_GPU_LIMIT", "0.3", 1);
  setenv("BANKML_GPU", "off", 1);
  bml_worker_options o;
  bml_worker_options_init(&o);
  o.device = index;
  o.share = 0.25;
  o.limit = 0.9;
  bml_worker *w;
  cr_assert_eq(open_logged(&o, &w), 0, "%s", logged);
  cr_assert_not_null(w, "BANKML_GPU=off overrode the device the caller chose: %s", logged);
  json_t *j = status(w);
  cr_expect_float_eq(json_real_value(json_object_get(j, "share")), 0.25, 1e-12);
  cr_expect_float_eq(json_real_value(json_object_get(j, "limit")), 0.9, 1e-12);
  cr_expect_eq(json_integer_value(json_object_get(j, "device")), (json_int_t)i);
  json_decref(j);
  expect_exact(w);
  bml_worker_close(w);
  /* unset: the variables (BANKML_GPU too: off) */
  bml_worker_options_init(&o);
  cr_assert_eq(open_logged(&o, &w), 0, "%s", logged);
  cr_expect_null(w, "BANKML_GPU=off was not taken for an unset device");
  unsetenv("BANKML_GPU");
  o.device = index;
  cr_assert_eq(open_logged(&o, &w), 0, "%s", logged);
  cr_assert_not_null(w, "%s", logged);
  j = status(w);
  cr_expect_float_eq(json_real_value(json_object_get(j, "share")), 0.7, 1e-12);
  cr_expect_float_eq(json_real_value(json_object_get(j, "limit")), 0.3, 1e-12);
  json_decref(j);
  bml_worker_close(w);
  /* a bad variable behind an explicit option is not read; unset, it is an error naming it */
  setenv("BANKML_GPU_SHARE", "lots", 1);
  o.share = 0.4;
  cr_expect_eq(open_logged(&o, &w), 0, "%s", logged);
  bml_worker_close(w);
  o.share = -1;
  cr_expect_eq(open_logged(&o, &w), BML_EENV);
  cr_expect(strstr(logged, "BANKML_GPU_SHARE=\"lots\"") != NULL, "%s", logged);
  /* software: the option wins over BANKML_GPU_SOFTWARE=1 */
  unsetenv("BANKML_GPU_SHARE");
  bml_worker_options_init(&o);
  o.software = 0;
  cr_assert_eq(open_logged(&o, &w), 0);
  bml_discover_options d;
  bml_discover_options_init(&d);
  bml_devices *l = NULL;
  cr_assert_eq(bml_devices_discover(&d, &l), 0);
  const bool software = strstr(bml_devices_get(l, i)->platform, "Portable Computing Language") != NULL;
  bml_devices_free(l);
  if (software) cr_expect_null(w, "software=0 did not keep PoCL out");
  bml_worker_close(w);
}

/* ---- the device --------------------------------------------------------------------------- */

Test(options, a_device_chosen_by_index_pci_address_or_uuid) {
  size_t i;
  bml_devices *l = listing(&i);
  const bml_device *dev = bml_devices_get(l, i);
  char by[3][80];
  snprintf(by[0], sizeof by[0], "%zu", i);
  snprintf(by[1], sizeof by[1], "pci:%s", dev->pci_address ? dev->pci_address : "0000:ff:1f.7");
  snprintf(by[2], sizeof by[2], "uuid:%s", dev->uuid ? dev->uuid : "00112233-4455-6677-8899-aabbccddeeff");
  const bool has[3] = {true, dev->pci_address != NULL, dev->uuid != NULL};
  for (int k = 0; k < 3; k++) {
    bml_worker_options o;
    bml_worker_options_init(&o);
    o.device = by[k];
    o.share = 0.5;
    bml_worker *w;
    int rc = open_logged(&o, &w);
    if (!has[k]) { /* this device has none: no device has the made-up one */
      cr_expect_eq(rc, BML_EINVAL, "%s", by[k]);
      cr_expect(strstr(logged, "bml_worker_options.device=") && strstr(logged, "no device"), "%s", logged);
      continue;
    }
    cr_assert_eq(rc, 0, "%s: %s", by[k], logged);
    cr_assert_not_null(w, "%s: %s", by[k], logged);
    json_t *j = status(w);
    cr_expect_eq(json_integer_value(json_object_get(j, "device")), (json_int_t)i, "%s", by[k]);
    json_decref(j);
    bml_worker_close(w);
  }
  /* the listing's uuid is the devices report's */
  char *report = NULL;
  cr_assert_eq(bml_devices_report_json(l, 0, &report), 0);
  json_t *r = json_loads(report, 0, NULL);
  json_t *ru = json_object_get(json_array_get(json_object_get(r, "devices"), i), "uuid");
  if (dev->uuid) cr_expect_str_eq(json_string_value(ru), dev->uuid);
  else cr_expect(json_is_null(ru));
  json_decref(r);
  free(report);
  bml_devices_free(l);
}

/* ---- the engine's context and queue -------------------------------------------------------- */

typedef struct {
  cl_context ctx;
  cl_command_queue queue;
  cl_device_id dev;
} engine;

/* The engine's own context (and, with queue_props >= 0, a queue with
 * those properties) on the card under test; false when the driver
 * refuses such a queue. */
static bool engine_open(engine *e, long queue_props) {
  size_t i;
  bml_devices *l = listing(&i);
  e->dev = bml_devices_get(l, i)->cl_device;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)bml_devices_get(l, i)->cl_platform, 0};
  bml_devices_free(l);
  cl_int rc;
  e->ctx = clCreateContext(props, 1, &e->dev, NULL, NULL, &rc);
  cr_assert_eq(rc, CL_SUCCESS);
  e->queue = NULL;
  if (queue_props >= 0) e->queue = clCreateCommandQueue(e->ctx, e->dev, (cl_command_queue_properties)queue_props, &rc);
  return rc == CL_SUCCESS;
}

static cl_uint refs(cl_context ctx, cl_command_queue q) {
  cl_uint n = 0;
  if (q) cr_assert_eq(clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL), CL_SUCCESS);
  else cr_assert_eq(clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL), CL_SUCCESS);
  return n;
}

/* The count once the driver's own references are gone: a command holds
 * its queue and context until the driver has retired it, which PoCL does
 * on a thread of its own some time after the command's event is released
 * (the count, read at once, was one above now and then).  The queue
 * finished, the count is read until it stops falling, for up to 2 s. */
static cl_uint settled_refs(cl_context ctx, cl_command_queue q, cl_uint want) {
  if (q) clFinish(q);
  cl_uint n = refs(ctx, q);
  for (int i = 0; i < 400 && n > want; i++) {
    struct timespec t = {0, 5000000};
    nanosleep(&t, NULL);
    n = refs(ctx, q);
  }
  return n;
}

static void engine_close(engine *e) {
  if (e->queue) clReleaseCommandQueue(e->queue);
  clReleaseContext(e->ctx);
}

/* On the engine's queue, with one queue, the worker creates no context or
 * queue: it computes through the engine's, which it retains while it lives
 * and gives back at close, and the engine's own work on the queue goes on.
 * (More queues, NVIDIA's default, are the worker's own on the engine's
 * context: doc/API.md.) */
Test(options, a_worker_on_the_engines_queue) {
  engine e;
  cr_assert(engine_open(&e, 0));
  const cl_uint q0 = refs(e.ctx, e.queue);
  bml_worker_options o;
  bml_worker_options_init(&o);
  o.cl_queue = e.queue; /* its context comes with it */
  o.share = 0.5;
  o.queues = 1;
  bml_worker *w;
  cr_assert_eq(open_logged(&o, &w), 0, "%s", logged);
  cr_assert_not_null(w, "%s", logged);
  cr_expect_gt(refs(e.ctx, e.queue), q0, "the worker does not hold the engine's queue");
  json_t *j = status(w);
  json_t *open = json_object_get(j, "open");
  cr_expect(json_is_true(json_object_get(open, "engine_context")) && json_is_true(json_object_get(open, "engine_queue")));
  cr_expect_eq(json_integer_value(json_object_get(j, "queues")), 1);
  json_decref(j);
  expect_exact(w);
  bml_worker_close(w);
  cr_expect_eq(settled_refs(e.ctx, e.queue, q0), q0, "the worker kept a reference to the engine's queue");
  /* the engine's queue still works */
  cl_int rc;
  cl_mem buf = clCreateBuffer(e.ctx, CL_MEM_READ_WRITE, 64, NULL, &rc);
  cr_assert_eq(rc, CL_SUCCESS);
  float x[16] = {0}, back[16];
  for (int k = 0; k < 16; k++) x[k] = (float)k;
  cr_expect_eq(clEnqueueWriteBuffer(e.queue, buf, CL_TRUE, 0, sizeof x, x, 0, NULL, NULL), CL_SUCCESS);
  cr_expect_eq(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL), CL_SUCCESS);
  cr_expect_eq(memcmp(x, back, sizeof x), 0);
  clReleaseMemObject(buf);
  engine_close(&e);
}

/* On the engine's context alone the worker makes its queue there. */
Test(options, a_worker_on_the_engines_context_makes_its_own_queue) {
  engine e;
  cr_assert(engine_open(&e, -1));
  const cl_uint c0 = refs(e.ctx, NULL);
  bml_worker_options o;
  bml_worker_options_init(&o);
  o.cl_context = e.ctx;
  o.share = 0.5;
  bml_worker *w;
  cr_assert_eq(open_logged(&o, &w), 0, "%s", logged);
  cr_assert_not_null(w, "%s", logged);
  json_t *j = status(w), *open = json_object_get(j, "open");
  cr_expect(json_is_true(json_object_get(open, "engine_context")) && json_is_false(json_object_get(open, "engine_queue")));
  json_decref(j);
  expect_exact(w);
  bml_worker_close(w);
  cr_expect_eq(settled_refs(e.ctx, NULL, c0), c0, "the worker kept a reference to the engine's context");
  engine_close(&e);
}

Test(options, an_out_of_order_queue_or_another_contexts_queue_is_refused) {
  engine a, b;
  cr_assert(engine_open(&a, 0));
  cr_assert(engine_open(&b, -1));
  bml_worker_options o;
  bml_worker_options_init(&o);
  o.cl_context = b.ctx;
  o.cl_queue = a.queue;
  bml_worker *w;
  cr_expect_eq(open_logged(&o, &w), BML_EINVAL);
  cr_expect(strstr(logged, "bml_worker_options.cl_queue is not a queue of bml_worker_options.cl_context"), "%s", logged);
  engine_close(&a);
  engine_close(&b);
  engine ooo;
  if (!engine_open(&ooo, (long)CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
    engine_close(&ooo);
    cr_skip_test("this driver makes no out-of-order queue (the refusal of another context's queue was checked)");
  }
  bml_worker_options_init(&o);
  o.cl_queue = ooo.queue;
  cr_expect_eq(open_logged(&o, &w), BML_EINVAL);
  cr_expect(strstr(logged, "an out-of-order queue") != NULL, "%s", logged);
  engine_close(&ooo);
}

/* The engine's device is still one bankml-cl must be allowed to use: PoCL
 * without software devices allowed is no worker, and the log says why. */
Test(options, an_engines_device_that_may_not_be_used_is_no_worker) {
  engine e;
  cr_assert(engine_open(&e, 0));
  cl_device_type type = 0;
  clGetDeviceInfo(e.dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  bml_worker_options o;
  bml_worker_options_init(&o);
  o.cl_queue = e.queue;
  o.software = 0;
  bml_worker *w;
  cr_assert_eq(open_logged(&o, &w), 0, "%s", logged);
  if (!(type & CL_DEVICE_TYPE_CPU)) {
    bml_worker_close(w);
    engine_close(&e);
    cr_skip_test("the card under test is a GPU: software=0 does not keep it out");
  }
  cr_expect_null(w);
  cr_expect(strstr(logged, "the engine's device") && strstr(logged, "is not usable"), "%s", logged);
  engine_close(&e);
}
