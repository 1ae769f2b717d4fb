// h3s: command-line front end (placeholder until the executors land).
int main() { return 0; }
