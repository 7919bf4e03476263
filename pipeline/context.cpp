#include "dice/pipeline/context.hpp"

namespace dice {

void context::renew() {
  context next;
  next.total_step = total_step + 1;
  next.env_step = env_step;
  next.env_episode = env_episode;
  next.train_iter = train_iter;
  next.last_eval_iter = last_eval_iter;
  next.last_eval_value = last_eval_value;
  next.wandb_url = std::move(wandb_url);
  next.model_version = model_version;
  next.keep = std::move(keep);
  *this = std::move(next);
}

} // namespace dice
