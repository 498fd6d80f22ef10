/* PLACEHOLDER: the engine test driver, being written. */
int main(void) { return 0; }
