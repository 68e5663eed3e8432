// The C API (hawser/c_api.h): the config table and effective values
// (hawser/config.h).
#include <cstring>
#include <string>
#include <vector>

#include "engine/c_api_util.h"
#include "hawser/config.h"

namespace {

using namespace hawser::capi;
using hawser::Code;

void setSource(int* source, hawser::ConfigSource s) {
  if (source) *source = static_cast<int>(s);
}

// hawser_config_int / _bool: `get` (configInt, configBool) of `key` under
// `options`, converted to `Out` into *out.
template <class Value, class Out, class Get>
int typedValue(const hawser_engine_options_t* options, const char* key, Out* out, int* source, Get get) {
  if (!key) return nullArg("key");
  if (!out) return nullArg("out");
  hawser::EngineOptions opts;
  if (int rc = toCpp(options, opts); rc != 0) return rc;
  Value v{};
  hawser::ConfigSource src = hawser::ConfigSource::kDefault;
  if (int rc = ret(get(key, opts, v, &src)); rc != 0) return rc;
  *out = static_cast<Out>(v);
  setSource(source, src);
  return 0;
}

static_assert(HAWSER_CONFIG_DEFAULT == int(hawser::ConfigSource::kDefault) &&
              HAWSER_CONFIG_ENVIRONMENT == int(hawser::ConfigSource::kEnvironment) &&
              HAWSER_CONFIG_OPTIONS == int(hawser::ConfigSource::kOptions));

}  // namespace

extern "C" {

int hawser_config_keys(hawser_config_key_t* out, size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    if (!count) return nullArg("count");
    const std::vector<hawser::ConfigKey> keys = hawser::configKeys();
    int rc = 0;
    if (!fitsOrReport(out, count, keys.size(), "config keys", &rc)) return rc;
    strings.clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      const hawser::ConfigKey& k = keys[i];
      out[i] = hawser_config_key_t{strings.keep(k.key),   strings.keep(k.env), strings.keep(k.type),
                                   strings.keep(k.default_value), strings.keep(k.range), strings.keep(k.doc),
                                   k.secret ? 1 : 0};
    }
    *count = keys.size();
    return 0;
  });
}

int hawser_config_value(const hawser_engine_options_t* options, const char* key, char* buf, size_t* len,
                        int* source) {
  return guarded([&] {
    if (!key) return nullArg("key");
    if (!len) return nullArg("len");
    hawser::EngineOptions opts;
    if (int rc = toCpp(options, opts); rc != 0) return rc;
    std::string text;
    hawser::ConfigSource src = hawser::ConfigSource::kDefault;
    if (int rc = ret(hawser::configValue(key, opts, text, &src)); rc != 0) return rc;
    int rc = 0;
    if (!fitsOrReport(buf, len, text.size() + 1, "config_value", &rc)) return rc;
    std::memcpy(buf, text.c_str(), text.size() + 1);
    *len = text.size() + 1;
    setSource(source, src);
    return 0;
  });
}

int hawser_config_int(const hawser_engine_options_t* options, const char* key, int64_t* out, int* source) {
  return guarded([&] {
    return typedValue<int64_t>(options, key, out, source, [](auto&&... a) { return hawser::configInt(a...); });
  });
}

int hawser_config_bool(const hawser_engine_options_t* options, const char* key, int* out, int* source) {
  return guarded([&] {
    return typedValue<bool>(options, key, out, source, [](auto&&... a) { return hawser::configBool(a...); });
  });
}

int hawser_validate_config(const hawser_engine_options_t* options) {
  return guarded([&] {
    hawser::EngineOptions opts;
    if (int rc = toCpp(options, opts); rc != 0) return rc;
    return ret(hawser::validateConfig(opts));
  });
}

}  // extern "C"
