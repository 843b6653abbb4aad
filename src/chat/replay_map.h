// Exact-replay memory: tool call id -> the DSML bytes the model actually sampled.
//
// Clients send earlier tool calls back as JSON; re-rendering JSON need not reproduce the
// sampled bytes, which would break KV prefix reuse and change what the model "said". This map
// remembers, per id, the whole sampled block so the next render can use it verbatim.
//
// Owns: the bounded LRU map (entry and byte limits, content-deduplicated refcounted blocks,
// RAM / disk source flag) and attaching remembered blocks to assistant messages. Thread-safe.
// Does not own: persisting entries in KV files (src/kvstore) or generating ids (tool_id.h).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/message.h"

namespace magnetar::chat {

enum class replay_source { ram, disk };

struct replay_limits {
    size_t max_entries = 100000;
    size_t max_bytes = size_t{512} << 20;  // 512 MiB
};

// What attach() did with one assistant message.
enum class replay_outcome {
    no_calls,       // the message has no tool calls
    replayed_ram,   // every id found, all on one block remembered in this process
    replayed_disk,  // as above, the block was loaded from a disk cache file
    canonical,      // ids found but on different blocks: canonical rendering
    missing,        // some id unknown: canonical rendering
};

const char* replay_outcome_name(replay_outcome o);

struct replay_entry {
    std::string id;
    std::shared_ptr<const std::string> block;
    replay_source source = replay_source::ram;
};

class replay_map {
  public:
    // Bookkeeping charged per entry and per distinct block on top of the string bytes.
    static constexpr size_t kEntryOverhead = 64;
    static constexpr size_t kBlockOverhead = 64;

    explicit replay_map(replay_limits limits = {});

    // Maps every id to `raw_dsml` (one stored copy per distinct block) and marks them most
    // recently used; an id already present is re-pointed. Least recently used entries are
    // evicted to stay within the limits; a block larger than the byte limit is not stored.
    void remember(const std::vector<std::string>& ids, std::string_view raw_dsml,
                  replay_source source = replay_source::ram);

    // The block remembered for `id` (touches it), or nullptr.
    std::shared_ptr<const std::string> lookup(std::string_view id);
    // Whether `id` is present; does not touch.
    bool contains(std::string_view id) const;

    // Sets m->raw_dsml when every call id of the assistant message is known and all map to
    // the same block; otherwise clears it so the canonical form is rendered.
    replay_outcome attach(message* m);

    void erase(std::string_view id);
    void clear();

    size_t size() const;
    size_t bytes() const;  // charged bytes (ids, distinct blocks, overheads)
    // All entries, most recently used first (for persisting the map).
    std::vector<replay_entry> entries() const;

  private:
    struct block_slot {
        std::shared_ptr<const std::string> text;
        size_t refs = 0;
    };
    struct node {
        std::string id;
        std::shared_ptr<const std::string> block;
        replay_source source;
    };

    std::shared_ptr<const std::string> acquire_block(std::string_view raw);
    void release_block(const std::shared_ptr<const std::string>& block);
    void erase_node(std::list<node>::iterator it);
    void evict();

    replay_limits limits_;
    mutable std::mutex mu_;
    std::list<node> lru_;  // front = most recently used
    std::unordered_map<std::string_view, std::list<node>::iterator> by_id_;  // keys view node.id
    std::unordered_map<std::string_view, block_slot> blocks_;  // keys view *block_slot.text
    size_t bytes_ = 0;
};

}  // namespace magnetar::chat
