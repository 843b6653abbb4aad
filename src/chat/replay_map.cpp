// Exact-replay memory: see replay_map.h.
#include "chat/replay_map.h"

namespace magnetar::chat {

const char* replay_outcome_name(replay_outcome o) {
    switch (o) {
        case replay_outcome::no_calls:
            return "no_calls";
        case replay_outcome::replayed_ram:
            return "replayed_ram";
        case replay_outcome::replayed_disk:
            return "replayed_disk";
        case replay_outcome::canonical:
            return "canonical";
        case replay_outcome::missing:
            return "missing";
    }
    return "?";
}

replay_map::replay_map(replay_limits limits) : limits_(limits) {}

std::shared_ptr<const std::string> replay_map::acquire_block(std::string_view raw) {
    auto it = blocks_.find(raw);
    if (it != blocks_.end()) {
        ++it->second.refs;
        return it->second.text;
    }
    auto text = std::make_shared<const std::string>(raw);
    block_slot slot;
    slot.text = text;
    slot.refs = 1;
    blocks_.emplace(std::string_view(*text), std::move(slot));
    bytes_ += text->size() + kBlockOverhead;
    return text;
}

void replay_map::release_block(const std::shared_ptr<const std::string>& block) {
    auto it = blocks_.find(std::string_view(*block));
    if (it == blocks_.end()) return;
    if (--it->second.refs == 0) {
        bytes_ -= block->size() + kBlockOverhead;
        blocks_.erase(it);
    }
}

void replay_map::erase_node(std::list<node>::iterator it) {
    by_id_.erase(std::string_view(it->id));
    release_block(it->block);
    bytes_ -= it->id.size() + kEntryOverhead;
    lru_.erase(it);
}

void replay_map::evict() {
    while (!lru_.empty() && (lru_.size() > limits_.max_entries || bytes_ > limits_.max_bytes)) {
        erase_node(std::prev(lru_.end()));
    }
}

void replay_map::remember(const std::vector<std::string>& ids, std::string_view raw_dsml,
                          replay_source source) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : ids) {
        auto it = by_id_.find(id);
        if (it != by_id_.end()) erase_node(it->second);
    }
    if (ids.empty() || raw_dsml.size() + kBlockOverhead + kEntryOverhead > limits_.max_bytes) {
        return;  // nothing to map, or a block that could never fit
    }
    for (const std::string& id : ids) {
        if (id.empty() || by_id_.count(id)) continue;  // empty or repeated within `ids`
        lru_.push_front(node{id, acquire_block(raw_dsml), source});
        by_id_.emplace(std::string_view(lru_.front().id), lru_.begin());
        bytes_ += id.size() + kEntryOverhead;
    }
    evict();
}

std::shared_ptr<const std::string> replay_map::lookup(std::string_view id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->block;
}

bool replay_map::contains(std::string_view id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return by_id_.count(id) != 0;
}

replay_outcome replay_map::attach(message* m) {
    if (m->tool_calls.empty()) return replay_outcome::no_calls;
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<const std::string> block;
    bool from_disk = false;
    bool same_block = true;
    bool all_found = true;
    for (const tool_call& c : m->tool_calls) {
        auto it = by_id_.find(c.id);
        if (c.id.empty() || it == by_id_.end()) {
            all_found = false;
            continue;
        }
        lru_.splice(lru_.begin(), lru_, it->second);  // lookups touch
        const node& n = *it->second;
        if (!block) {
            block = n.block;
            from_disk = n.source == replay_source::disk;
        } else if (n.block != block) {
            same_block = false;
        }
    }
    if (!all_found) {
        m->raw_dsml.reset();
        return replay_outcome::missing;
    }
    if (!same_block) {
        m->raw_dsml.reset();
        return replay_outcome::canonical;
    }
    m->raw_dsml = *block;
    return from_disk ? replay_outcome::replayed_disk : replay_outcome::replayed_ram;
}

void replay_map::erase(std::string_view id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_id_.find(id);
    if (it != by_id_.end()) erase_node(it->second);
}

void replay_map::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    by_id_.clear();
    lru_.clear();
    blocks_.clear();
    bytes_ = 0;
}

size_t replay_map::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lru_.size();
}

size_t replay_map::bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
}

std::vector<replay_entry> replay_map::entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<replay_entry> out;
    out.reserve(lru_.size());
    for (const node& n : lru_) out.push_back(replay_entry{n.id, n.block, n.source});
    return out;
}

}  // namespace magnetar::chat
