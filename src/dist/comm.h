// The transport of the pipeline: MPI point-to-point messages with errors turned into
// magnetar::Error, receives that poll (so a waiting rank does not spin a core the stage next
// to it needs, and a wait can time out), and the process-wide MPI state.
//
// Without MPI (MAGNETAR_HAVE_MPI 0) the process is always a single rank: launched_multi() is
// false and every transfer throws.
//
// Owns: MPI initialisation and finalisation, the error handler, the termination handler that
// reports a job aborted by mpirun, and the byte counters behind the wire statistics. Does not
// own: message meanings (protocol.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace magnetar::dist {

// Built with MPI.
bool built_with_mpi();
// Started by mpirun (or another MPI launcher) as one of several processes: read from the
// launcher's environment, before init().
bool launched_multi();

// MPI_Init (thread level serialized: any thread may communicate, one at a time; the engine
// serializes its sessions), errors
// returned instead of aborting, and a SIGTERM handler that says why the job ends. Throws
// magnetar::Error on failure.
void init(int* argc, char*** argv);
// MPI_Finalize when init() ran; safe to call twice.
void finalize();
// Ends every rank of the job (MPI_Abort).
[[noreturn]] void abort_job(int code);

bool active();  // init() ran and the job has more than one rank
int rank();
int size();
std::string host_name();

// Blocking send of n bytes. Throws magnetar::Error naming the peer on failure.
void send(int dest, int tag, const void* data, size_t n);

// Receives one message with `tag` from `src` (-1: any rank) into data[0 .. cap). Polls with
// a growing sleep (10 to 200 us). timeout_s > 0: throws magnetar::Error after that long
// with `what` in the message. Returns the bytes received; *from receives the sender.
size_t recv(int src, int tag, void* data, size_t cap, double timeout_s, const char* what,
            int* from = nullptr);

// True when a message with `tag` from `src` is waiting to be received.
bool probe(int src, int tag);

// A send in flight (MPI_Isend) whose buffer the caller keeps alive until wait().
class async_send {
  public:
    async_send() = default;
    ~async_send();
    async_send(const async_send&) = delete;
    async_send& operator=(const async_send&) = delete;
    void start(int dest, int tag, const void* data, size_t n);
    void wait();
    // True when no send is in flight (finishing it if it just completed).
    bool test();
    bool busy() const { return busy_; }

  private:
    alignas(8) unsigned char request_[64] = {0};  // MPI_Request
    bool busy_ = false;
    int dest_ = 0;
};

// Bytes this rank has sent / received since start (wire statistics of `magnetar bench`).
uint64_t bytes_sent();
uint64_t bytes_received();
uint64_t messages_sent();

}  // namespace magnetar::dist
