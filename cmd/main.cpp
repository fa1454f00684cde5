// terngrad: the command-line entry point; cmd/cli.h has the subcommands and the exit statuses.
#include "cmd/cli.h"

int main(int argc, char** argv) {
  return tg::cli::run(argc, argv);
}
