// convgrad-peak: measures this machine's arithmetic peak (peak_measure.cpp)
// for convgrad-sweep --peaks=FILE and convgrad-bench --peaks=FILE.
//
// usage: convgrad-peak [--out=FILE]   (JSON; standard output without --out)
#include "perf.hpp"

#include <exception>
#include <fstream>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
    std::string out_path;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--out=", 0) == 0) {
            out_path = arg.substr(6);
        } else {
            std::cerr << "usage: convgrad-peak [--out=FILE]\n";
            return 2;
        }
    }
    std::string log, json;
    try {
        json = convgrad::cli::measure_peaks_json(convgrad::cli::peak_method{}, &log);
    } catch (const std::exception& e) {
        std::cerr << "convgrad-peak: " << e.what() << '\n';
        return 1;
    }
    std::cerr << log;
    if (out_path.empty()) {
        std::cout << json;
    } else {
        std::ofstream(out_path) << json;
        std::cerr << "wrote " << out_path << '\n';
    }
    return 0;
}
