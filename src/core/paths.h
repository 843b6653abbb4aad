// File lookup relative to the checkout: finds data that the set-up script puts beside the
// sources (the default model, the npm packages) from wherever the binary runs.
#pragma once

#include <string>

namespace magnetar {

// First existing `dir/rel` where dir is the current directory or one of its ancestors, or the
// running executable's directory or one of its ancestors (up to 6 levels each). Empty if none.
std::string find_in_ancestors(const std::string& rel);

}  // namespace magnetar
