// What rank 0 reports: test-set evaluation, the --metrics-file records, the --dump-params file.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "data.hpp"
#include "model.hpp"
#include "options.hpp"
#include "pipeline.hpp"

namespace ddprun::train {

struct EvalResult {
  double loss = 0;
  double accuracy = -1;  // classifier only
};

// Loss (and accuracy for the classifier) over the whole test set, through every stage of the
// pipeline (all stages of one replica call it); the result is stage 0's. Leaves net in training mode.
EvalResult evaluate(Pipe& pipe, Net& net, const Data& data, const Options& o, bool classifier);

// Appends one JSON line to the --metrics-file.
void append_metrics(const std::string& path, const nlohmann::json& rec);

// Writes the parameters as JSON {name: [values]}.
void dump_params(Net& net, const std::string& path);

}  // namespace ddprun::train
