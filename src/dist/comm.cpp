#include "dist/comm.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "core/error.h"
#include "core/format.h"

#if MAGNETAR_HAVE_MPI
#include <mpi.h>
#endif

namespace magnetar::dist {

namespace {

bool g_init = false;
int g_rank = 0;
int g_size = 1;
uint64_t g_sent = 0;
uint64_t g_received = 0;
uint64_t g_messages = 0;

// mpirun sends SIGTERM to every surviving rank when one rank exits early or is killed; say so
// instead of dying silently. Only async-signal-safe calls.
char g_term_message[160];
size_t g_term_length = 0;

extern "C" void on_sigterm(int) {
    if (g_term_length > 0) {
        ssize_t ignored = write(2, g_term_message, g_term_length);
        (void)ignored;
    }
    _exit(1);
}

}  // namespace

bool built_with_mpi() {
    return MAGNETAR_HAVE_MPI != 0;
}

bool launched_multi() {
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
        const char* v = std::getenv(var);
        if (v && std::atoi(v) > 1) return true;
    }
    return false;
}

bool active() {
    return g_init && g_size > 1;
}
int rank() {
    return g_rank;
}
int size() {
    return g_size;
}
uint64_t bytes_sent() {
    return g_sent;
}
uint64_t bytes_received() {
    return g_received;
}
uint64_t messages_sent() {
    return g_messages;
}

std::string host_name() {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
    return buf;
}

#if MAGNETAR_HAVE_MPI

namespace {

std::string mpi_error(int rc) {
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return std::string(text, static_cast<size_t>(len));
}

int checked_count(size_t n) {
    if (n > static_cast<size_t>(std::numeric_limits<int>::max()))
        throw Error(strfmt("pipeline: message of %zu bytes exceeds the MPI limit of 2 GiB", n));
    return static_cast<int>(n);
}

// Waits for a request, sleeping between tests. Returns false on timeout.
bool poll(MPI_Request* req, MPI_Status* st, double timeout_s, int peer) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    int sleep_us = 10;
    for (;;) {
        int done = 0;
        const int rc = MPI_Test(req, &done, st);
        if (rc != MPI_SUCCESS)
            throw Error(strfmt("pipeline: communication with rank %d failed: %s", peer,
                               mpi_error(rc).c_str()));
        if (done) return true;
        if (timeout_s > 0 && std::chrono::duration<double>(clock::now() - t0).count() > timeout_s) {
            MPI_Cancel(req);
            MPI_Request_free(req);
            return false;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        sleep_us = std::min(sleep_us * 2, 200);
    }
}

}  // namespace

void init(int* argc, char*** argv) {
    if (g_init) return;
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) throw Error("pipeline: MPI_Init failed: " + mpi_error(rc));
    g_init = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const int n = std::snprintf(
        g_term_message, sizeof(g_term_message),
        "magnetar: error: rank %d: the MPI job is being aborted (another rank exited or was "
        "killed; see mpirun's message)\n",
        g_rank);
    g_term_length = n > 0 ? std::min(static_cast<size_t>(n), sizeof(g_term_message) - 1) : 0;
    std::signal(SIGTERM, on_sigterm);
}

void finalize() {
    if (!g_init) return;
    g_init = false;
    MPI_Finalize();
}

void abort_job(int code) {
    if (g_init) MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
}

void send(int dest, int tag, const void* data, size_t n) {
    const int rc = MPI_Send(data, checked_count(n), MPI_BYTE, dest, tag, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        throw Error(strfmt("pipeline: send to rank %d failed: %s", dest, mpi_error(rc).c_str()));
    g_sent += n;
    ++g_messages;
}

size_t recv(int src, int tag, void* data, size_t cap, double timeout_s, const char* what,
            int* from) {
    MPI_Request req;
    const int peer = src < 0 ? MPI_ANY_SOURCE : src;
    int rc = MPI_Irecv(data, checked_count(cap), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS)
        throw Error(strfmt("pipeline: receive of %s failed: %s", what, mpi_error(rc).c_str()));
    MPI_Status st;
    if (!poll(&req, &st, timeout_s, src)) {
        throw Error(strfmt("pipeline: no %s from rank %d within %.0f s", what, src, timeout_s));
    }
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (from) *from = st.MPI_SOURCE;
    g_received += static_cast<uint64_t>(count);
    return static_cast<size_t>(count);
}

static_assert(sizeof(MPI_Request) <= 64, "MPI_Request does not fit async_send");

void async_send::start(int dest, int tag, const void* data, size_t n) {
    MAGNETAR_ASSERT(!busy_, "async_send: previous send not finished");
    auto* req = reinterpret_cast<MPI_Request*>(request_);
    const int rc = MPI_Isend(data, checked_count(n), MPI_BYTE, dest, tag, MPI_COMM_WORLD, req);
    if (rc != MPI_SUCCESS)
        throw Error(strfmt("pipeline: send to rank %d failed: %s", dest, mpi_error(rc).c_str()));
    busy_ = true;
    dest_ = dest;
    g_sent += n;
    ++g_messages;
}

void async_send::wait() {
    if (!busy_) return;
    busy_ = false;
    MPI_Status st;
    poll(reinterpret_cast<MPI_Request*>(request_), &st, 0, dest_);
}

bool async_send::test() {
    if (!busy_) return true;
    int done = 0;
    MPI_Status st;
    const int rc = MPI_Test(reinterpret_cast<MPI_Request*>(request_), &done, &st);
    if (rc != MPI_SUCCESS)
        throw Error(strfmt("pipeline: send to rank %d failed: %s", dest_, mpi_error(rc).c_str()));
    if (done) busy_ = false;
    return done != 0;
}

bool probe(int src, int tag) {
    int flag = 0;
    MPI_Status st;
    const int rc = MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, &st);
    if (rc != MPI_SUCCESS)
        throw Error(strfmt("pipeline: probe of rank %d failed: %s", src, mpi_error(rc).c_str()));
    return flag != 0;
}

async_send::~async_send() {
    if (busy_) {
        try {
            wait();
        } catch (const Error&) {
        }
    }
}

#else  // no MPI

namespace {
[[noreturn]] void no_mpi() {
    throw Error("pipeline: this build has no MPI support (install libopenmpi-dev, reconfigure)");
}
}  // namespace

void init(int*, char***) {
    no_mpi();
}
void finalize() {}
void abort_job(int code) {
    std::_Exit(code);
}
void send(int, int, const void*, size_t) {
    no_mpi();
}
size_t recv(int, int, void*, size_t, double, const char*, int*) {
    no_mpi();
}
void async_send::start(int, int, const void*, size_t) {
    no_mpi();
}
void async_send::wait() {}
bool async_send::test() {
    return true;
}
bool probe(int, int) {
    no_mpi();
}
async_send::~async_send() = default;

#endif

}  // namespace magnetar::dist
