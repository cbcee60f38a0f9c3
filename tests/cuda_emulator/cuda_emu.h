// The CUDA execution model on the CPU, for running our kernels/*.cu under g++.
//
// A kernel file is compiled as C++ with this header included first. Blocks run one
// at a time, in an order the launch chooses; a block's threads are ucontext fibers on
// one OS thread, switched only where CUDA threads must wait for each other:
//   - __syncthreads() is a barrier of the whole block; threads reaching it from
//     different lines, or while another thread has exited, are an error;
//   - a warp is 32 consecutive threads (x fastest, then y, then z); __shfl_xor_sync is a
//     barrier of the lanes in its mask plus an exchange; a lane outside the mask, lanes
//     arriving with different masks, offsets or lines, or a source lane outside the mask,
//     are errors;
//   - when no thread can run and some have not finished (a barrier or shuffle that some
//     threads never reach), the launch fails with a description instead of hanging;
//   - a thread reaching a barrier or shuffle after the launch's time limit fails it (a loop
//     that never ends but keeps synchronising). A loop with no barrier or shuffle in it
//     cannot be stopped: it has the only OS thread.
// __shared__ variables are function statics placed in the section "cuda_shared"; the
// launch fills that whole section with NaN bytes (0xff) before every block, so a read
// of shared memory nobody wrote in this block shows up as NaN. Fibers run in a fixed
// order chosen by the launch (ascending, descending or a seeded shuffle of the thread
// indices), so a missing barrier changes results between orders instead of by chance.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

struct dim3 {
    unsigned x, y, z;
};

namespace emu {

enum class State { runnable, at_barrier, at_shuffle, done };

struct Thread {
    ucontext_t context;
    dim3 index;
    int linear;
    State state;
    int line;  // where it waits
    char* stack;
};

struct Warp {
    unsigned mask = 0, arrived = 0;
    int line = 0, offset = 0;
    float values[32], results[32];
};

inline dim3 block_index, block_dim, grid_dim;
inline std::vector<Thread> threads;
inline std::vector<Warp> warps;
inline Thread* current = nullptr;
inline ucontext_t scheduler;
inline std::function<void()> body;
inline std::string error;
inline int barrier_count = 0, barrier_line = 0, exited = 0;
inline std::chrono::steady_clock::time_point deadline;
inline std::vector<std::unique_ptr<char[]>> stacks;  // one per thread, kept from launch to launch
#if defined(__SANITIZE_ADDRESS__)
inline const size_t stack_bytes = 512 * 1024;  // ASan's frames are larger
#else
inline const size_t stack_bytes = 64 * 1024;
#endif
inline const void* scheduler_stack = nullptr;  // for ASan's fiber annotations
inline size_t scheduler_stack_size = 0;

// Switch from the running context to `to` (whose stack is to_stack); `leaving` when never coming back.
inline void switch_to(ucontext_t* from, ucontext_t* to, const void* to_stack, size_t to_size, bool leaving = false) {
#if defined(__SANITIZE_ADDRESS__)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(leaving ? nullptr : &fake, to_stack, to_size);
    swapcontext(from, to);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    (void)to_stack;
    (void)to_size;
    (void)leaving;
    swapcontext(from, to);
#endif
}

inline void to_scheduler(bool leaving = false) {
    switch_to(&current->context, &scheduler, scheduler_stack, scheduler_stack_size, leaving);
}

inline std::string where(const Thread& t) {
    char text[96];
    std::snprintf(text, sizeof text, "thread (%u,%u,%u)", t.index.x, t.index.y, t.index.z);
    return text;
}

// Record the first error and leave this fiber for good.
[[noreturn]] inline void fail(const std::string& message) {
    if (error.empty()) error = where(*current) + ": " + message;
    current->state = State::done;
    ++exited;
    to_scheduler(true);
    std::abort();  // the scheduler never resumes a failed fiber
}

inline void wait_here() { to_scheduler(); }

inline void check_time(const char* what, int line) {
    if (std::chrono::steady_clock::now() > deadline) {
        fail(std::string(what) + " at line " + std::to_string(line) + " after the launch's time limit: an endless loop?");
    }
}

inline void syncthreads(int line) {
    check_time("__syncthreads", line);
    if (exited > 0) {
        const Thread& gone = *std::find_if(threads.begin(), threads.end(), [](const Thread& t) { return t.state == State::done; });
        fail("__syncthreads at line " + std::to_string(line) + " after " + where(gone) + " exited");
    }
    if (barrier_count == 0) barrier_line = line;
    if (line != barrier_line) {
        fail("__syncthreads at line " + std::to_string(line) + " while others wait at line " + std::to_string(barrier_line));
    }
    current->state = State::at_barrier;
    current->line = line;
    if (++barrier_count == (int)threads.size()) {
        barrier_count = 0;
        for (Thread& t : threads) t.state = State::runnable;
        return;
    }
    wait_here();
}

template <typename T>
inline T shfl_xor(unsigned mask, T value, int offset, int line) {
    static_assert(sizeof(T) == sizeof(float), "shuffles of 32-bit values only");
    check_time("__shfl_xor_sync", line);
    const int lane = current->linear & 31;
    Warp& w = warps[current->linear >> 5];
    if (!((mask >> lane) & 1u)) fail("__shfl_xor_sync at line " + std::to_string(line) + " from a lane outside its mask");
    if (w.arrived == 0) {
        w.mask = mask;
        w.line = line;
        w.offset = offset;
    } else if (w.mask != mask || w.line != line || w.offset != offset) {
        fail("divergent __shfl_xor_sync: line " + std::to_string(line) + " offset " + std::to_string(offset) +
             " while lanes wait at line " + std::to_string(w.line) + " offset " + std::to_string(w.offset));
    }
    std::memcpy(&w.values[lane], &value, sizeof value);
    w.arrived |= 1u << lane;
    current->state = State::at_shuffle;
    current->line = line;
    if (w.arrived == mask) {
        for (int l = 0; l < 32; ++l) {
            if (!((mask >> l) & 1u)) continue;
            const int source = l ^ offset;
            if (source > 31 || !((mask >> source) & 1u)) fail("__shfl_xor_sync reads lane " + std::to_string(source) + ", outside the mask");
            w.results[l] = w.values[source];
            threads[(current->linear & ~31) + l].state = State::runnable;
        }
        w.arrived = 0;
    } else {
        wait_here();
    }
    T out;
    std::memcpy(&out, &w.results[lane], sizeof out);
    return out;
}

inline void fiber_main() {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack, &scheduler_stack_size);
#endif
    body();
    current->state = State::done;
    ++exited;
    to_scheduler(true);
}

// Why no thread can run: how many threads wait where, and how many exited.
inline std::string stuck() {
    std::string text = "deadlock: no thread can run:";
    for (State state : {State::at_barrier, State::at_shuffle, State::done}) {
        std::vector<int> lines;
        for (const Thread& t : threads) {
            if (t.state == state && std::find(lines.begin(), lines.end(), t.line) == lines.end()) lines.push_back(t.line);
        }
        for (int line : lines) {
            int count = 0;
            const Thread* first = nullptr;
            for (const Thread& t : threads) {
                if (t.state != state || (state != State::done && t.line != line)) continue;
                if (!first) first = &t;
                ++count;
            }
            text += " " + std::to_string(count) + " threads from " + where(*first) +
                    (state == State::done ? " exited;" : (state == State::at_barrier ? " wait at __syncthreads" : " wait at a shuffle") +
                                                             std::string(" line ") + std::to_string(line) + ";");
            if (state == State::done) break;
        }
    }
    return text;
}

}  // namespace emu

extern "C" char __start_cuda_shared[] __attribute__((weak));
extern "C" char __stop_cuda_shared[] __attribute__((weak));

namespace emu {

// Run every thread of the current block to completion, in `order`; false on an error.
inline bool run_block(const std::vector<int>& order) {
    if (__start_cuda_shared != nullptr) std::memset(__start_cuda_shared, 0xff, __stop_cuda_shared - __start_cuda_shared);
    barrier_count = exited = 0;
    for (Warp& w : warps) w.arrived = 0;
    for (Thread& t : threads) {
        getcontext(&t.context);
        t.context.uc_stack.ss_sp = t.stack;
        t.context.uc_stack.ss_size = stack_bytes;
        t.context.uc_link = nullptr;  // fiber_main never returns
        makecontext(&t.context, fiber_main, 0);
        t.state = State::runnable;
    }
    for (bool progressed = true; progressed;) {
        progressed = false;
        for (int i : order) {
            Thread& t = threads[i];
            if (t.state != State::runnable) continue;
            current = &t;
            switch_to(&scheduler, &t.context, t.stack, stack_bytes);
            if (!error.empty()) return false;
            progressed = true;
        }
    }
    for (const Thread& t : threads) {
        if (t.state != State::done) {
            error = stuck();
            return false;
        }
    }
    return true;
}

// order: 0 ascending, 1 descending, else a shuffle seeded by it (blocks and threads alike).
inline std::vector<int> sequence(int count, int order, unsigned salt) {
    std::vector<int> out(count);
    for (int i = 0; i < count; ++i) out[i] = i;
    if (order == 1) std::reverse(out.begin(), out.end());
    if (order > 1) {
        std::mt19937 generator((unsigned)order * 2654435761u + salt);
        std::shuffle(out.begin(), out.end(), generator);
    }
    return out;
}

// Launch `kernel` over grid x block within `seconds`; returns 0, or 1 with the message in `message`.
inline int launch(const unsigned* grid, const unsigned* block, int order, double seconds, std::function<void()> kernel,
                  char* message, int message_size) {
    error.clear();
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
    body = std::move(kernel);
    grid_dim = {grid[0], grid[1], grid[2]};
    block_dim = {block[0], block[1], block[2]};
    const int count = (int)(block[0] * block[1] * block[2]);
    threads.assign(count, Thread{});
    warps.assign((count + 31) / 32, Warp{});
    while ((int)stacks.size() < count) stacks.emplace_back(new char[stack_bytes]);
    for (int i = 0; i < count; ++i) {
        threads[i].linear = i;
        threads[i].index = {i % block[0], (i / block[0]) % block[1], i / (block[0] * block[1])};
        threads[i].stack = stacks[i].get();
    }
    const long long blocks = (long long)grid[0] * grid[1] * grid[2];
    std::vector<int> block_order = sequence((int)blocks, order, 0u);
    int salt = 1;
    for (int b : block_order) {
        block_index = {b % grid[0], (b / grid[0]) % grid[1], b / (grid[0] * grid[1])};
        if (!run_block(sequence(count, order, salt++))) {
            std::snprintf(message, message_size, "block (%u,%u,%u), %s", block_index.x, block_index.y, block_index.z,
                          error.c_str());
            return 1;
        }
    }
    return 0;
}

}  // namespace emu

// ---- the CUDA names the kernels use ----------------------------------------------------------

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static __attribute__((section("cuda_shared")))
#define threadIdx (emu::current->index)
#define blockIdx (emu::block_index)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define __syncthreads() emu::syncthreads(__LINE__)
#define __shfl_xor_sync(mask, value, offset) emu::shfl_xor((mask), (value), (offset), __LINE__)

inline void __threadfence() {}  // blocks run one after another: every write is already visible

// Fibers switch only at barriers and shuffles, so an atomic is a plain read-modify-write.
template <typename T>
inline T atomicAdd(T* address, T value) {
    const T old = *address;
    *address = old + value;
    return old;
}

inline float __int_as_float(int bits) {
    float out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

inline unsigned int __float_as_uint(float value) {
    unsigned int out;
    std::memcpy(&out, &value, sizeof out);
    return out;
}

using std::max;
using std::min;
