// Helpers shared by the tests of tools/ (test_cli_*.cpp).
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#ifndef CONVGRAD_SHAPES_DIR
#define CONVGRAD_SHAPES_DIR ""
#endif

// ../shared/shapes beside the repository, when it is there (CI clones it).
inline std::optional<std::filesystem::path> shapes_dir() {
    const std::filesystem::path dir(CONVGRAD_SHAPES_DIR);
    if (dir.empty() || !std::filesystem::is_directory(dir / "conv")) return std::nullopt;
    return dir;
}

inline std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
